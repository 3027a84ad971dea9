/**
 * `npm run events:export`: the NDJSON export core (batches, filters, resume checkpoint, decrypted
 * and shredded personal data), its command line and sink, and one smoke test that runs the script
 * against a database filled here.
 */
import { randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Writable } from "node:stream"
import { describe, layer } from "@effect/vitest"
import { Effect, Either, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import { expect, it as vitest } from "vitest"
import { type EventLogItem, exportEventLog, parseEventLogRequest } from "../../src/audit/EventLog.js"
import { makeSink, openSink, parseExportArgs } from "../../src/audit/Export.js"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import * as Checkpoint from "../../src/eventstore/Checkpoint.js"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { KnownEventTypesLive } from "../../src/eventstore/EventType.js"
import { PersistenceLive } from "../../src/eventstore/layers.js"
import { scopedDatabaseUrl, TestPersistence } from "../support/database.js"
import { AccountDeposited, AccountOpened, appendDeposits, appendOpened } from "../support/sample.js"
import { runScript } from "../support/scripts.js"

const seed = Effect.gen(function* () {
  const store = yield* EventStore
  yield* appendOpened("x-1", "Ada")
  yield* appendDeposits("x-1", [1])
  yield* appendOpened("x-2", "Grace")
  yield* appendDeposits("x-2", [2])
  yield* appendDeposits("x-1", [3])
  yield* store.forgetSubject("x-2")
})

const query = (request: Parameters<typeof parseEventLogRequest>[0]) =>
  Effect.orDie(parseEventLogRequest(request, { maxLimit: Number.POSITIVE_INFINITY, defaultLimit: Infinity }))

/** Runs the export into memory: the chunks written and the lines they hold. */
const run = (request: Parameters<typeof parseEventLogRequest>[0], batchSize = 2) =>
  Effect.gen(function* () {
    const store = yield* EventStore
    const chunks: Array<string> = []
    const summary = yield* exportEventLog(
      store,
      yield* query(request),
      (chunk) => Effect.sync(() => void chunks.push(chunk)),
      { batchSize }
    )
    const items = chunks
      .join("")
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l) as EventLogItem)
    return { summary, chunks, items }
  })

layer(
  Layer.merge(
    TestPersistence.pipe(Layer.tap((ctx) => Effect.provide(seed, ctx))),
    KnownEventTypesLive([AccountOpened, AccountDeposited])
  ),
  {
    excludeTestServices: true,
    timeout: 60_000
  }
)("exportEventLog", (it) => {
  it.effect("the whole history, one line per event, read in batches", () =>
    Effect.gen(function* () {
      const { summary, chunks, items } = yield* run({})
      expect(items.map((i) => `${i.streamId}@${i.streamVersion}`)).toEqual([
        "x-1@1",
        "x-1@2",
        "x-2@1",
        "x-2@2",
        "x-1@3"
      ])
      // batchSize 2: no write holds more than one batch.
      expect(chunks.length).toBe(3)
      for (const chunk of chunks)
        expect(chunk.split("\n").filter((l) => l !== "").length).toBeLessThanOrEqual(2)
      expect(Object.keys(items[0] ?? {}).sort()).toEqual(
        [
          "checkpoint",
          "data",
          "eventId",
          "metadata",
          "position",
          "recordedAt",
          "schemaVersion",
          "streamId",
          "streamVersion",
          "type"
        ].sort()
      )
      expect(items[0]?.data).toEqual({ accountId: "x-1", owner: "Ada", currency: "EUR" })
      expect(items[2]?.data).toEqual({ accountId: "x-2", owner: { _tag: "Shredded" }, currency: "EUR" })
      expect(summary).toEqual({
        events: 5,
        firstPosition: items[0]?.position,
        lastPosition: items[4]?.position,
        checkpoint: items[4]?.checkpoint
      })
    })
  )

  it.effect("filters and resume", () =>
    Effect.gen(function* () {
      const one = yield* run({ streamId: "x-1" })
      expect(one.items.map((i) => i.streamVersion)).toEqual([1, 2, 3])
      const opened = yield* run({ types: ["account.opened"] })
      expect(opened.items.map((i) => i.streamId)).toEqual(["x-1", "x-2"])
      const all = yield* run({}, 1000)
      expect(all.chunks.length).toBe(1)
      const rest = yield* run({ after: all.items[1]?.checkpoint })
      expect(rest.items.map((i) => i.eventId)).toEqual(all.items.slice(2).map((i) => i.eventId))
      const limited = yield* run({ limit: 2 })
      expect(limited.items.length).toBe(2)
      const nothing = yield* run({ after: all.summary.checkpoint })
      expect(nothing.summary).toEqual({
        events: 0,
        firstPosition: null,
        lastPosition: null,
        checkpoint: all.summary.checkpoint
      })
      expect(Checkpoint.format(Checkpoint.origin)).toBe((yield* run({ streamId: "none" })).summary.checkpoint)
    })
  )
})

describe("parseEventLogRequest", () => {
  vitest("an unbounded limit only where the caller allows it", () => {
    const refused = Effect.runSync(Effect.flip(parseEventLogRequest({ limit: Number.POSITIVE_INFINITY })))
    expect(refused.param).toBe("limit")
    const allowed = Effect.runSync(
      parseEventLogRequest({ limit: Number.POSITIVE_INFINITY }, { maxLimit: Number.POSITIVE_INFINITY })
    )
    expect(allowed.limit).toBe(Number.POSITIVE_INFINITY)
  })
})

describe("events:export command line and sink", () => {
  vitest("options", () => {
    const parsed = parseExportArgs([
      "--out",
      "/tmp/x.ndjson",
      "--stream",
      "order-1",
      "--after",
      "5:7",
      "--types",
      "a.b, c.d,,",
      "--batch-size",
      "50"
    ])
    expect(Either.getOrThrow(parsed)).toEqual({
      out: "/tmp/x.ndjson",
      batchSize: 50,
      help: false,
      request: { streamId: "order-1", after: "5:7", types: ["a.b", "c.d"], limit: Infinity }
    })
    expect(Either.getOrThrow(parseExportArgs([])).request).toEqual({ limit: Infinity })
    expect(Either.getOrThrow(parseExportArgs(["--limit", "10"])).request.limit).toBe(10)
    expect(Either.isLeft(parseExportArgs(["--limit", "0"]))).toBe(true)
    expect(Either.isLeft(parseExportArgs(["--limit", "1e3"]))).toBe(true)
    expect(Either.isLeft(parseExportArgs(["--bogus"]))).toBe(true)
    expect(Either.isLeft(parseExportArgs(["positional"]))).toBe(true)
    expect(Either.getOrThrow(parseExportArgs(["--help"])).help).toBe(true)
  })

  vitest("the sink waits for a slow stream to drain", async () => {
    let maxBuffered = 0
    const slow = new Writable({
      highWaterMark: 16,
      write(_chunk, _enc, done) {
        setTimeout(done, 2)
      }
    })
    const sink = makeSink("slow", slow, { end: true })
    await Effect.runPromise(
      Effect.gen(function* () {
        for (let i = 0; i < 50; i++) {
          yield* sink.write(`${"x".repeat(10)}\n`)
          maxBuffered = Math.max(maxBuffered, slow.writableLength)
        }
        yield* sink.finish
      })
    )
    expect(slow.writableFinished).toBe(true)
    expect(maxBuffered).toBeLessThanOrEqual(16 + 11)
  })

  vitest(
    "a file appears only when complete; an aborted export leaves the earlier file as it was",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "events-sink-"))
      try {
        const out = join(dir, "history.ndjson")
        writeFileSync(out, "earlier export\n")
        await Effect.runPromise(
          Effect.gen(function* () {
            const failed = yield* openSink(out)
            yield* failed.write("half\n")
            yield* failed.abort
          })
        )
        expect(readFileSync(out, "utf8")).toBe("earlier export\n")
        expect(existsSync(`${out}.partial`)).toBe(false)

        await Effect.runPromise(
          Effect.gen(function* () {
            const sink = yield* openSink(out)
            yield* sink.write("one\n")
            expect(readFileSync(out, "utf8")).toBe("earlier export\n")
            yield* sink.write("two\n")
            yield* sink.finish
          })
        )
        expect(readFileSync(out, "utf8")).toBe("one\ntwo\n")
        expect(existsSync(`${out}.partial`)).toBe(false)
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    }
  )
})

const exportEvents = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  runScript("scripts/events-export.ts", args, { ...process.env, LOG_LEVEL: "warning", ...env })

describe("npm run events:export", () => {
  layer(Layer.empty, { excludeTestServices: true, timeout: 120_000 })("smoke", (it) => {
    it.scoped(
      "exports a filled database to a file and to stdout",
      () =>
        Effect.gen(function* () {
          const dir = mkdtempSync(join(tmpdir(), "events-export-"))
          yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
          const key = randomBytes(32).toString("hex")
          const url = yield* scopedDatabaseUrl
          const config = makeAppConfig({
            databaseUrl: Option.map(url, Redacted.make),
            pgliteDataDir: join(dir, "pglite"),
            dataEncryptionKey: Option.some(Redacted.make(key))
          })
          // Fill the database, then close it (the embedded one admits a single process).
          yield* Effect.scoped(
            Effect.provide(seed, PersistenceLive.pipe(Layer.provide(Layer.succeed(AppConfig, config))))
          ).pipe(Logger.withMinimumLogLevel(LogLevel.Warning))
          const env = {
            DATABASE_URL: Option.getOrElse(url, () => ""),
            PGLITE_DATA_DIR: join(dir, "pglite"),
            DATA_ENCRYPTION_KEY: key,
            DATA_DIR: dir
          }

          const out = join(dir, "history.ndjson")
          const toFile = yield* exportEvents(["--out", out, "--types", "account.opened"], env)
          expect(toFile.code, toFile.stderr).toBe(0)
          expect(existsSync(`${out}.partial`)).toBe(false)
          const lines = readFileSync(out, "utf8").trimEnd().split("\n")
          const items = lines.map((l) => JSON.parse(l) as EventLogItem)
          expect(items.map((i) => i.data)).toEqual([
            { accountId: "x-1", owner: "Ada", currency: "EUR" },
            { accountId: "x-2", owner: { _tag: "Shredded" }, currency: "EUR" }
          ])
          expect(toFile.stderr).toContain(`exported 2 events`)
          expect(toFile.stderr).toContain(`resume with --after ${items[1]?.checkpoint}`)

          const toStdout = yield* exportEvents(
            ["--stream", "x-1", "--after", items[0]?.checkpoint ?? ""],
            env
          )
          expect(toStdout.code, toStdout.stderr).toBe(0)
          const streamed = toStdout.stdout
            .trimEnd()
            .split("\n")
            .map((l) => JSON.parse(l) as EventLogItem)
          expect(streamed.map((i) => `${i.streamId}@${i.streamVersion}:${i.type}`)).toEqual([
            "x-1@2:account.deposited",
            "x-1@3:account.deposited"
          ])
          expect(toStdout.stderr).toContain("exported 2 events")

          const bad = yield* exportEvents(["--after", "yesterday"], env)
          expect(bad.code).toBe(2)
          expect(bad.stderr).toContain("--after")
        }),
      120_000
    )
  })
})
