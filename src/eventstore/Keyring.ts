/**
 * Crypto-shredding. Each data subject (a customer, a user) has its own AES-256-GCM data key; the key
 * is stored wrapped by the master key (`DATA_ENCRYPTION_KEY`). Personal fields in event payloads are
 * encrypted under the subject key; forgetting the subject destroys the key, so the ciphertext that
 * stays in the append-only log becomes unreadable and reads back as `Shredded`.
 */
import { createCipheriv, createDecipheriv, createHash, hkdfSync } from "node:crypto"
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Data, Effect, Layer, Option } from "effect"
import { localSecret } from "../base/LocalSecret.js"
import { randomBytesPooled } from "../base/Random.js"
import { AppConfig } from "../config.js"
import { type Shredded, shredded } from "./EventType.js"
import { SubjectForgotten } from "./errors.js"

export class MasterKeyError extends Data.TaggedError("MasterKeyError")<{ readonly message: string }> {}

export interface MasterKey {
  readonly id: string
  readonly key: Buffer
}

const IV_BYTES = 12
const TAG_BYTES = 16

const seal = (key: Buffer, plaintext: Buffer, aad: string): Buffer => {
  const iv = randomBytesPooled(IV_BYTES)
  const cipher = createCipheriv("aes-256-gcm", key, iv)
  cipher.setAAD(Buffer.from(aad, "utf8"))
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()])
  return Buffer.concat([iv, cipher.getAuthTag(), body])
}

const open = (key: Buffer, sealed: Buffer, aad: string): Buffer => {
  const decipher = createDecipheriv("aes-256-gcm", key, sealed.subarray(0, IV_BYTES))
  decipher.setAAD(Buffer.from(aad, "utf8"))
  decipher.setAuthTag(sealed.subarray(IV_BYTES, IV_BYTES + TAG_BYTES))
  return Buffer.concat([decipher.update(sealed.subarray(IV_BYTES + TAG_BYTES)), decipher.final()])
}

export const parseMasterKey = (text: string): Effect.Effect<MasterKey, MasterKeyError> => {
  const trimmed = text.trim()
  const key = /^[0-9a-fA-F]{64}$/.test(trimmed) ? Buffer.from(trimmed, "hex") : Buffer.from(trimmed, "base64")
  if (key.length !== 32) {
    return Effect.fail(
      new MasterKeyError({ message: "DATA_ENCRYPTION_KEY must be 32 bytes, as 64 hex characters or base64" })
    )
  }
  return Effect.succeed({ id: createHash("sha256").update(key).digest("hex").slice(0, 16), key })
}

/**
 * The master key: `DATA_ENCRYPTION_KEY` (required in production); otherwise generated once and kept
 * beside the embedded data (`<DATA_DIR>/data-encryption.key`), or in memory for a `memory://` database.
 */
export const loadMasterKey = Effect.gen(function* () {
  const config = yield* AppConfig
  const secret = yield* localSecret({
    configured: config.dataEncryptionKey,
    variable: "DATA_ENCRYPTION_KEY",
    fileName: "data-encryption.key"
  }).pipe(Effect.mapError((e) => new MasterKeyError({ message: e.message })))
  switch (secret.source) {
    case "ephemeral":
      yield* Effect.logWarning(
        "DATA_ENCRYPTION_KEY is not set: using a throw-away key for the in-memory database"
      )
      break
    case "generated":
      yield* Effect.logWarning(
        `DATA_ENCRYPTION_KEY is not set: generated a master key in ${secret.file}. Back it up — personal data is unreadable without it. Set DATA_ENCRYPTION_KEY in production.`
      )
      break
    case "file":
      yield* Effect.logWarning(
        `DATA_ENCRYPTION_KEY is not set: using the generated master key in ${secret.file}`
      )
  }
  return yield* parseMasterKey(secret.text)
})

/** How a personal field is stored: the subject and base64(iv ‖ tag ‖ ciphertext). */
export interface Envelope {
  readonly $pii: string
  readonly v: string
}

export const isEnvelope = (value: unknown): value is Envelope =>
  typeof value === "object" &&
  value !== null &&
  typeof (value as { $pii?: unknown }).$pii === "string" &&
  typeof (value as { v?: unknown }).v === "string"

/**
 * How an append that seals with `sealInline` treats the subject's key in its own statement: `live`,
 * a key this process holds, which the statement checks is still the subject's key (`wrapped`, base64,
 * equal to the row's: not forgotten, not a key whose transaction rolled back); `new`, a
 * key drawn for a subject this process knows no key of, which the statement inserts — and refuses
 * the append, writing nothing else, when the subject already had one (then the caller seals again
 * with `sealAll`).
 */
export type InlineKey =
  | { readonly subject: string; readonly kind: "live"; readonly wrapped: string }
  | { readonly subject: string; readonly kind: "new"; readonly wrapped: string; readonly kekId: string }

export interface KeyringShape {
  /** Encrypts JSON values for one subject with a single key lookup, creating its key on first use. */
  readonly sealAll: (
    subject: string,
    values: ReadonlyArray<unknown>
  ) => Effect.Effect<ReadonlyArray<Envelope>, SubjectForgotten | SqlError>
  /**
   * Encrypts JSON values for one subject with no statement: the caller's append creates or checks the
   * key in its own statement (`InlineKey`).
   */
  readonly sealInline: (
    subject: string,
    values: ReadonlyArray<unknown>
  ) => { readonly envelopes: ReadonlyArray<Envelope>; readonly key: InlineKey }
  /** Drops the key this process holds for writing a subject's data (an append found it stale). */
  readonly dropCached: (subject: string) => void
  /**
   * A `sealInline` key that an append checked (or created) has COMMITTED as the subject's key: it
   * now decrypts too, as if read (the same time-to-live), so reading back what was just written
   * looks nothing up. Only after the commit: a key of a transaction that rolled back may never be
   * the subject's.
   */
  readonly keyCommitted: (subject: string, wrapped: string) => Effect.Effect<void>
  /** Decrypts envelopes; a forgotten subject's envelope becomes `Shredded`. */
  readonly open: (
    envelopes: ReadonlyArray<Envelope>
  ) => Effect.Effect<ReadonlyArray<unknown | Shredded>, SqlError>
  /** Destroys the subject's key (idempotent). Returns whether a key existed. */
  readonly forget: (subject: string) => Effect.Effect<boolean, SqlError>
  readonly isForgotten: (subject: string) => Effect.Effect<boolean, SqlError>
  /**
   * Encrypts bytes that are not a subject's personal data but must not rest in clear (stored HTTP
   * responses carrying secrets), under a key derived from the master key; `context` binds the
   * ciphertext to where it is stored.
   */
  readonly sealBytes: (plaintext: Uint8Array, context: string) => Uint8Array
  /** None when the bytes were not sealed under this master key and context (or were altered). */
  readonly openBytes: (sealed: Uint8Array, context: string) => Option.Option<Uint8Array>
}

export class Keyring extends Context.Tag("Keyring")<Keyring, KeyringShape>() {}

interface KeyRow {
  readonly subjectId: string
  readonly wrappedDek: Buffer | null
}

/** Data keys read for decryption are cached briefly; a shredded subject is cached for good. */
const CACHE_TTL_MS = 60_000
const CACHE_MAX = 10_000

export const makeKeyring = (master: MasterKey) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const cache = new Map<string, { readonly dek: Buffer | null; readonly at: number }>()
    const remember = (subject: string, dek: Buffer | null, at: number) => {
      if (cache.size >= CACHE_MAX) cache.clear()
      cache.set(subject, { dek, at })
    }
    /**
     * Keys for `sealInline`, with the wrapped form the append's statement compares to the row: a key
     * held here may belong to a transaction that rolled back (or to a subject since forgotten), so it
     * is only ever used under that check. Separate from `cache`, which decrypts without a check.
     */
    const forWriting = new Map<string, { readonly dek: Buffer; readonly wrapped: Buffer }>()
    const holdForWriting = (subject: string, dek: Buffer, wrapped: Buffer) => {
      if (forWriting.size >= CACHE_MAX) forWriting.clear()
      forWriting.set(subject, { dek, wrapped })
    }
    const unwrap = (subject: string, wrapped: Buffer) => open(master.key, wrapped, `dek:${subject}`)
    const bytesKey = Buffer.from(
      hkdfSync("sha256", master.key, Buffer.alloc(0), "commerce-platform/sealed-bytes", 32)
    )

    const loadKeys = (subjects: ReadonlyArray<string>) =>
      sql<KeyRow>`SELECT subject_id AS "subjectId", wrapped_dek AS "wrappedDek"
                  FROM event_store.subject_keys WHERE subject_id = ANY(${subjects})`

    // Encryption always checks the key row in the current transaction, so personal data is never
    // written for a subject another process has just forgotten. One statement either way: it creates
    // the key (a fresh subject) or, when a row exists, inserts nothing and returns the row's key (a
    // data-modifying CTE's rows are invisible to the rest of its statement, so exactly one branch
    // answers). A new key is drawn and wrapped on every call for that (microseconds).
    const keyForWriting = (subject: string) =>
      Effect.gen(function* () {
        const dek = randomBytesPooled(32)
        const wrapped = seal(master.key, dek, `dek:${subject}`)
        const now = new Date(yield* Clock.currentTimeMillis)
        const rows = yield* sql<{ readonly wrappedDek: Buffer | null; readonly created: boolean }>`
          WITH created AS (
            INSERT INTO event_store.subject_keys (subject_id, wrapped_dek, kek_id, created_at)
            VALUES (${subject}, ${wrapped}, ${master.id}, ${now})
            ON CONFLICT (subject_id) DO NOTHING RETURNING 1
          )
          SELECT NULL::bytea AS "wrappedDek", true AS created FROM created
          UNION ALL
          SELECT wrapped_dek, false FROM event_store.subject_keys WHERE subject_id = ${subject}`
        const row = rows[0]
        if (row?.created) {
          holdForWriting(subject, dek, wrapped)
          return dek
        }
        // No row at all: another transaction created the key after this statement's snapshot was
        // taken (the insert waited for it and found the conflict): read what it committed.
        const found = row ?? (yield* loadKeys([subject]))[0]
        if (!found?.wrappedDek) return yield* new SubjectForgotten({ subjectId: subject })
        const existing = unwrap(subject, found.wrappedDek)
        holdForWriting(subject, existing, found.wrappedDek)
        return existing
      })

    const envelope = (dek: Buffer, subject: string, value: unknown): Envelope => ({
      $pii: subject,
      v: seal(dek, Buffer.from(JSON.stringify(value) ?? "null", "utf8"), subject).toString("base64")
    })

    const keyring: KeyringShape = {
      sealAll: (subject, values) =>
        Effect.map(keyForWriting(subject), (dek) => values.map((value) => envelope(dek, subject, value))),
      sealInline: (subject, values) => {
        // A key held for writing (the append checks it is still the subject's key) or a new one,
        // held from now on: if its transaction rolls back, the next append's check finds it stale.
        const held = forWriting.get(subject)
        if (held) {
          return {
            envelopes: values.map((value) => envelope(held.dek, subject, value)),
            key: { subject, kind: "live", wrapped: held.wrapped.toString("base64") }
          }
        }
        const dek = randomBytesPooled(32)
        const wrapped = seal(master.key, dek, `dek:${subject}`)
        holdForWriting(subject, dek, wrapped)
        return {
          envelopes: values.map((value) => envelope(dek, subject, value)),
          key: { subject, kind: "new", wrapped: wrapped.toString("base64"), kekId: master.id }
        }
      },
      dropCached: (subject) => void forWriting.delete(subject),
      keyCommitted: (subject, wrapped) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          const held = forWriting.get(subject)
          if (held !== undefined && held.wrapped.toString("base64") === wrapped)
            remember(subject, held.dek, now)
        }),
      open: (envelopes) =>
        Effect.gen(function* () {
          if (envelopes.length === 0) return []
          const now = yield* Clock.currentTimeMillis
          const wanted = new Set<string>()
          for (const e of envelopes) {
            const hit = cache.get(e.$pii)
            if (!hit || (hit.dek !== null && now - hit.at > CACHE_TTL_MS)) wanted.add(e.$pii)
          }
          if (wanted.size > 0) {
            const rows = yield* loadKeys([...wanted])
            for (const row of rows) {
              const dek = row.wrappedDek ? unwrap(row.subjectId, row.wrappedDek) : null
              remember(row.subjectId, dek, now)
              if (dek && row.wrappedDek) holdForWriting(row.subjectId, dek, row.wrappedDek)
            }
            // A subject without a key row never had personal data written: treat as forgotten.
            for (const s of wanted) if (!rows.some((r) => r.subjectId === s)) remember(s, null, now)
          }
          return envelopes.map((e) => {
            const dek = cache.get(e.$pii)?.dek
            if (!dek) return shredded
            try {
              return JSON.parse(open(dek, Buffer.from(e.v, "base64"), e.$pii).toString("utf8")) as unknown
            } catch {
              // A tampered ciphertext cannot be authenticated: it reads as unavailable, never as garbage.
              return shredded
            }
          })
        }),
      forget: (subject) =>
        Effect.gen(function* () {
          const now = new Date(yield* Clock.currentTimeMillis)
          // `existed` = a key was there before this call (not merely a tombstone row), so a repeated
          // erasure reports false.
          const rows = yield* sql<{ existed: boolean }>`
            WITH previous AS (
              SELECT wrapped_dek IS NOT NULL AS had_key FROM event_store.subject_keys
               WHERE subject_id = ${subject} FOR UPDATE
            ), shred AS (
              INSERT INTO event_store.subject_keys (subject_id, wrapped_dek, kek_id, created_at, shredded_at)
              VALUES (${subject}, NULL, ${master.id}, ${now}, ${now})
              ON CONFLICT (subject_id) DO UPDATE SET wrapped_dek = NULL,
                shredded_at = coalesce(event_store.subject_keys.shredded_at, EXCLUDED.shredded_at)
              RETURNING 1
            ) -- (a data-modifying WITH always runs to completion, read or not)
            SELECT coalesce((SELECT had_key FROM previous), false) AS existed`
          remember(subject, null, now.getTime())
          forWriting.delete(subject)
          return rows[0]?.existed ?? false
        }),
      isForgotten: (subject) =>
        Effect.map(loadKeys([subject]), (rows) => rows.length > 0 && rows[0]?.wrappedDek === null),
      sealBytes: (plaintext, context) => seal(bytesKey, Buffer.from(plaintext), context),
      openBytes: (sealed, context) => {
        try {
          return Option.some(open(bytesKey, Buffer.from(sealed), context))
        } catch {
          return Option.none()
        }
      }
    }
    return keyring
  })

export const KeyringLive = Layer.effect(Keyring, Effect.flatMap(loadMasterKey, makeKeyring))
