/**
 * `npm run events:export`: the command line and the sink of the NDJSON export (the reading is
 * `exportEventLog`). Output goes to a file or stdout with backpressure (a write that the stream
 * refuses waits for `drain`), so memory stays flat however long the history. A file is written
 * beside its target and moved into place only once complete: a failed or interrupted export never
 * leaves a truncated file that looks like a whole history, nor clobbers an earlier one.
 */
import { createWriteStream } from "node:fs"
import { rename, rm } from "node:fs/promises"
import type { Writable } from "node:stream"
import { parseArgs } from "node:util"
import { Data, Effect, Either } from "effect"
import type { EventLogRequest } from "./EventLog.js"

export interface ExportArgs {
  readonly request: EventLogRequest
  /** A file path; stdout when absent. */
  readonly out?: string
  readonly batchSize: number
  readonly help: boolean
}

export class ExportUsageError extends Data.TaggedError("ExportUsageError")<{ readonly message: string }> {}

export const EXPORT_USAGE = `usage: npm run -s events:export -- [options]

Writes the event history as NDJSON (one event per line) to a file or stdout; a summary goes to stderr.
Secret fields (password and key hashes, signing secrets, tokens) are written as "[secret]".
Keep npm's -s when redirecting stdout: without it npm prints its banner to stdout first.

  --out <path>          write to this file, in place once complete (default: stdout)
  --stream <id>         only this stream
  --after <checkpoint>  start after this checkpoint ("<xid>:<position>", as in each line's "checkpoint")
  --types <a,b,…>       only these event types
  --limit <n>           at most n events (default: all)
  --batch-size <n>      events per database read (default 1000)
  --help                this text`

const positiveInt = (
  name: string,
  value: string | undefined
): Either.Either<number | undefined, ExportUsageError> => {
  if (value === undefined) return Either.right(undefined)
  const n = Number(value)
  return /^\d+$/.test(value.trim()) && Number.isSafeInteger(n) && n >= 1
    ? Either.right(n)
    : Either.left(new ExportUsageError({ message: `--${name} must be a positive integer, got "${value}"` }))
}

/** Parses the command line (without `node script`). Unknown options are errors. */
export const parseExportArgs = (argv: ReadonlyArray<string>): Either.Either<ExportArgs, ExportUsageError> => {
  let values: Record<string, string | boolean | undefined>
  try {
    values = parseArgs({
      args: [...argv],
      options: {
        out: { type: "string" },
        stream: { type: "string" },
        after: { type: "string" },
        types: { type: "string" },
        limit: { type: "string" },
        "batch-size": { type: "string" },
        help: { type: "boolean", short: "h" }
      },
      strict: true,
      allowPositionals: false
    }).values
  } catch (e) {
    return Either.left(new ExportUsageError({ message: (e as Error).message }))
  }
  const str = (k: string) => {
    const v = values[k]
    return typeof v === "string" ? v : undefined
  }
  const limit = positiveInt("limit", str("limit"))
  if (Either.isLeft(limit)) return Either.left(limit.left)
  const batch = positiveInt("batch-size", str("batch-size"))
  if (Either.isLeft(batch)) return Either.left(batch.left)
  const types = str("types")
    ?.split(",")
    .map((t) => t.trim())
    .filter((t) => t !== "")
  const out = str("out")
  const request: EventLogRequest = {
    ...(str("stream") === undefined ? {} : { streamId: str("stream") }),
    ...(str("after") === undefined ? {} : { after: str("after") }),
    ...(types === undefined || types.length === 0 ? {} : { types }),
    limit: limit.right ?? Number.POSITIVE_INFINITY
  }
  return Either.right({
    request,
    batchSize: batch.right ?? 1000,
    help: values.help === true,
    ...(out === undefined ? {} : { out })
  })
}

export interface Sink {
  readonly name: string
  /** Resolves at once while the stream accepts data, after `drain` when its buffer is full. */
  readonly write: (chunk: string) => Effect.Effect<void, Error>
  /** Flushes the stream; a file is closed and moved into place. */
  readonly finish: Effect.Effect<void, Error>
  /** After a failure: a file is discarded (whatever stood at `--out` before stays as it was). */
  readonly abort: Effect.Effect<void>
}

/** A sink over a Node writable stream; `end` closes it when finished (files, not stdout). */
export const makeSink = (name: string, stream: Writable, options: { readonly end: boolean }): Sink => {
  let failure: Error | undefined
  stream.on("error", (error: Error) => {
    failure ??= error
  })
  const write = (chunk: string) =>
    Effect.async<void, Error>((resume) => {
      if (failure) return resume(Effect.fail(failure))
      if (stream.write(chunk)) return resume(Effect.void)
      const onDrain = () => {
        stream.off("error", onError)
        resume(Effect.void)
      }
      const onError = (error: Error) => {
        stream.off("drain", onDrain)
        resume(Effect.fail(error))
      }
      stream.once("drain", onDrain)
      stream.once("error", onError)
    })
  const finish = Effect.async<void, Error>((resume) => {
    const done = () => resume(failure ? Effect.fail(failure) : Effect.void)
    if (failure) return done()
    if (options.end) stream.end(done)
    else stream.write("", done)
  })
  return { name, write, finish, abort: Effect.void }
}

/** `--out` file (written to `<out>.partial`, renamed to `out` by `finish`), or stdout. */
export const openSink = (out: string | undefined): Effect.Effect<Sink, Error> =>
  out === undefined
    ? Effect.succeed(makeSink("stdout", process.stdout, { end: false }))
    : Effect.async<Sink, Error>((resume) => {
        const partial = `${out}.partial`
        const file = createWriteStream(partial, { flags: "w" })
        const onError = (error: Error) => resume(Effect.fail(error))
        file.once("error", onError)
        file.once("open", () => {
          file.off("error", onError)
          const sink = makeSink(out, file, { end: true })
          resume(
            Effect.succeed({
              ...sink,
              finish: Effect.zipRight(
                sink.finish,
                Effect.tryPromise({ try: () => rename(partial, out), catch: (e) => e as Error })
              ),
              abort: Effect.sync(() => file.destroy()).pipe(
                Effect.zipRight(Effect.tryPromise(() => rm(partial, { force: true }))),
                Effect.ignore
              )
            })
          )
        })
      })
