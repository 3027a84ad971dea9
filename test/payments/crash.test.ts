/**
 * Issue #19 item 5: "a crash between the processor call and recording its outcome is recovered by
 * asking the processor again with the same idempotency key — test it by killing the process at that
 * point". The service as a user runs it (`tsx src/main.ts`, test/support/service.ts), with
 * `PAYMENTS_CRASH_AFTER_CALL=1`: the process SIGKILLs itself right after the test processor answered
 * a confirmation and before the outcome is recorded. A second process over the same database (no
 * hook; `ROLE=all` runs the `payments-recovery` worker) finds the call pending when its safety net
 * comes due, asks the processor again with the same key — the processor's records (migration 0018)
 * outlived the first process, so it answers the first answer and charges nothing more — and records
 * the outcome: the intent succeeded, one charge for the key (asked twice), one payment, one
 * `payment.captured` event.
 *
 * On both databases: PostgreSQL (a scratch database of DATABASE_URL's server) and the embedded one
 * (a PGlite data directory the two processes open one after the other).
 */

import { randomBytes } from "node:crypto"
import { once } from "node:events"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import pg from "pg"
import { describe, expect, it } from "vitest"
import { testDatabaseUrl } from "../support/database.js"
import { type Service, startService, waitUntil } from "../support/service.js"

const ADMIN = { email: "crash-admin@example.com", password: "a strong admin password" }

type Query = (text: string, params: ReadonlyArray<unknown>) => Promise<ReadonlyArray<Record<string, unknown>>>

const json = async (
  service: Service,
  method: string,
  path: string,
  token: string | undefined,
  body?: unknown
) => {
  const response = await fetch(`${service.base}${path}`, {
    method,
    headers: {
      "content-type": "application/json",
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` })
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  const text = await response.text()
  return { status: response.status, body: text === "" ? undefined : JSON.parse(text), text }
}

const up = async (service: Service) => {
  await waitUntil(
    "the service answers",
    service,
    async () => (await fetch(`${service.base}/health`).catch(() => undefined))?.status === 200,
    90_000
  )
  const login = await json(service, "POST", "/auth/login", undefined, ADMIN)
  expect(login.status, `${login.text}\n${service.output}`).toBe(200)
  return String(login.body.accessToken)
}

const stop = async (service: Service) => {
  if (service.child.exitCode !== null || service.child.signalCode !== null) return
  service.child.kill("SIGTERM")
  await once(service.child, "exit")
}

/** The crash, the restart, the recovery; then what the database holds, through `query`. */
const crashAndRecover = async (env: NodeJS.ProcessEnv, query: () => Promise<Query>) => {
  const common = {
    ...env,
    ADMIN_EMAIL: ADMIN.email,
    ADMIN_PASSWORD: ADMIN.password,
    PAYMENT_PROCESSOR: "test",
    PAYMENT_RECOVERY_AFTER_SECONDS: "1",
    ROLE: "all"
  }
  const doomed = await startService({ ...common, PAYMENTS_CRASH_AFTER_CALL: "1" })
  let intentId = ""
  try {
    const token = await up(doomed)
    const created = await json(doomed, "POST", "/v1/payment-intents", token, {
      amount: 1357,
      currency: "USD",
      paymentMethod: "pm_card_visa"
    })
    expect(created.status, created.text).toBe(201)
    intentId = String(created.body.id)
    // The confirmation reaches the processor, which answers; the process dies before recording it.
    const lost = await json(doomed, "POST", `/v1/payment-intents/${intentId}/confirm`, token, {}).then(
      () => "answered",
      () => "no answer"
    )
    expect(lost).toBe("no answer")
    if (doomed.child.exitCode === null && doomed.child.signalCode === null) await once(doomed.child, "exit")
    expect(doomed.child.signalCode, doomed.output).toBe("SIGKILL")
  } finally {
    if (doomed.child.exitCode === null && doomed.child.signalCode === null) doomed.child.kill("SIGKILL")
  }

  const next = await startService(common)
  try {
    const token = await up(next)
    // Left `processing` by the dead process until the safety net comes due (1 s) and is handled.
    let intent: Record<string, unknown> = {}
    await waitUntil(
      "the recovery worker records the outcome",
      next,
      async () => {
        intent = (await json(next, "GET", `/v1/payment-intents/${intentId}`, token)).body
        return intent.status === "succeeded"
      },
      30_000,
      200
    )
    expect(intent).toMatchObject({ status: "succeeded", amount: 1357, amountReceived: 1357 })
    const payments = await json(next, "GET", `/v1/payments?paymentIntentId=${intentId}`, token)
    expect(payments.body.data.map((p: { status: string }) => p.status)).toEqual(["succeeded"])
    expect(payments.body.data[0].id).toBe(intent.latestPaymentId)
  } finally {
    await stop(next)
  }

  const q = await query()
  const key = `${intentId}:confirm:1`
  // One charge for the key: the first process asked once, the worker asked again and got the first answer.
  expect(
    await q(
      "SELECT idempotency_key, operation, requests FROM payments.test_processor_calls WHERE starts_with(idempotency_key, $1)",
      [intentId]
    )
  ).toEqual([{ idempotency_key: key, operation: "authorize", requests: 2 }])
  expect(
    await q(
      "SELECT status, captured FROM payments.test_processor_charges WHERE processor_reference = (SELECT result->>'processorReference' FROM payments.test_processor_calls WHERE idempotency_key = $1)",
      [key]
    )
  ).toEqual([{ status: "captured", captured: 1357 }])
  expect(
    await q(
      "SELECT type FROM event_store.public_events WHERE stream_id = $1 AND type LIKE 'payment.%' ORDER BY position",
      [`payment_intent-${intentId}`]
    )
  ).toEqual([{ type: "payment.authorized" }, { type: "payment.captured" }])
  expect(
    await q("SELECT count(*)::int AS n FROM payments.payments WHERE payment_intent_id = $1", [intentId])
  ).toEqual([{ n: 1 }])
}

describe("a process killed between the processor's answer and its record", () => {
  it.skipIf(testDatabaseUrl === undefined)(
    "PostgreSQL: the next process's worker asks again with the same key and records it once",
    async () => {
      const server = testDatabaseUrl ?? ""
      const name = `cp_test_crash_${randomBytes(6).toString("hex")}`
      const admin = new pg.Client({ connectionString: server })
      await admin.connect()
      await admin.query(`CREATE DATABASE ${name}`)
      const url = new URL(server)
      url.pathname = `/${name}`
      const dataDir = mkdtempSync(join(tmpdir(), "cp-crash-pg-"))
      const client = new pg.Client({ connectionString: url.toString() })
      try {
        await crashAndRecover({ DATABASE_URL: url.toString(), DATA_DIR: dataDir }, async () => {
          await client.connect()
          return async (text, params) => (await client.query(text, [...params])).rows
        })
      } finally {
        await client.end().catch(() => undefined)
        await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
        await admin.end()
        rmSync(dataDir, { recursive: true, force: true })
      }
    },
    240_000
  )

  it("embedded PGlite: the same, the two processes opening one data directory in turn", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "cp-crash-embedded-"))
    let db: PGlite | undefined
    try {
      await crashAndRecover({ DATA_DIR: dataDir, PGLITE_DATA_DIR: join(dataDir, "pglite") }, async () => {
        db = await PGlite.create(join(dataDir, "pglite"), { extensions: { pg_trgm } })
        const open = db
        return async (text, params) => (await open.query<Record<string, unknown>>(text, [...params])).rows
      })
    } finally {
      await db?.close()
      rmSync(dataDir, { recursive: true, force: true })
    }
  }, 240_000)
})
