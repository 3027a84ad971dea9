/**
 * Access tokens (HS256 JWTs), the refresh/reset token formats and password rules, without a
 * database. Property tests check that no input makes verification die: a bad token is always a
 * typed `InvalidAccessToken`.
 */
import { createHmac, randomBytes } from "node:crypto"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Clock, Duration, Effect, Exit, Option, TestClock } from "effect"
import * as fc from "fast-check"
import { generateKeyPair, SignJWT } from "jose"
import { uuidv7FromMillis } from "../../src/base/Uuid.js"
import { parseRefreshToken, parseResetToken } from "../../src/identity/Identity.js"
import { makePasswordHasher, PASSWORD_MAX_LENGTH, passwordProblem } from "../../src/identity/passwords.js"
import { ADMIN_SCOPE, ALL_SCOPES } from "../../src/identity/permissions.js"
import { randomBase62 } from "../../src/identity/secrets.js"
import {
  type AccessClaims,
  InvalidAccessToken,
  ISSUER,
  type IssueInput,
  makeAccessTokens
} from "../../src/identity/tokens.js"
import * as Ids from "../../src/kernel/Ids.js"

// --- Helpers ---------------------------------------------------------------------------------------

const key = randomBytes(32)
const tokens = makeAccessTokens(key)
const NOW_MS = Date.parse("2030-06-01T12:00:00.000Z")
const NOW_S = Math.floor(NOW_MS / 1000)

/** A clock frozen at `ms`. */
const fixedClock = (ms: number): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => ms,
  currentTimeMillis: Effect.succeed(ms),
  unsafeCurrentTimeNanos: () => BigInt(ms) * 1_000_000n,
  currentTimeNanos: Effect.succeed(BigInt(ms) * 1_000_000n),
  sleep: () => Effect.void
})

const issueAt = (ms: number, input: IssueInput) =>
  Effect.runPromise(tokens.issue(input).pipe(Effect.withClock(fixedClock(ms))))

const verifyAt = (ms: number, token: string) =>
  Effect.runPromiseExit(tokens.verify(token).pipe(Effect.withClock(fixedClock(ms))))

/** The typed error of a failed verification; fails the test on success or on a defect. */
const failureOf = (exit: Exit.Exit<AccessClaims, InvalidAccessToken>): InvalidAccessToken => {
  if (Exit.isSuccess(exit)) return expect.fail(`expected a failure, got ${JSON.stringify(exit.value)}`)
  expect(Cause.isDie(exit.cause), Cause.pretty(exit.cause)).toBe(false)
  expect(Cause.isInterrupted(exit.cause)).toBe(false)
  const error = Cause.failureOption(exit.cause)
  if (Option.isNone(error)) return expect.fail(`expected a typed failure: ${Cause.pretty(exit.cause)}`)
  expect(error.value).toBeInstanceOf(InvalidAccessToken)
  return error.value
}

const reasonOf = (exit: Exit.Exit<AccessClaims, InvalidAccessToken>) => failureOf(exit).reason

const b64url = (value: string | Uint8Array) => Buffer.from(value).toString("base64url")
const hs256 = (input: string, secret: Uint8Array = key) =>
  createHmac("sha256", secret).update(input).digest("base64url")

/** A compact JWS built by hand: any header, any payload (JSON-encoded unless raw), HS256 by default. */
const handBuilt = (
  header: unknown,
  payload: unknown,
  sign: (signingInput: string) => string = (input) => hs256(input)
) => {
  const signingInput = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`
  return `${signingInput}.${sign(signingInput)}`
}

const validClaims = (overrides: Record<string, unknown> = {}) => ({
  iss: ISSUER,
  sub: "usr_01jd4x8m6ffq2b3n5r7t9v1w3a",
  jti: "5b1e6f0e-7d0f-4f43-9d5e-3b1c7f5c2a10",
  iat: NOW_S,
  exp: NOW_S + 3600,
  scope: "read:orders",
  role: "customer",
  ...overrides
})

const HS256_HEADER = { alg: "HS256", typ: "JWT" }

const userInput: IssueInput = {
  subject: "usr_01jd4x8m6ffq2b3n5r7t9v1w3a",
  tokenId: "5b1e6f0e-7d0f-4f43-9d5e-3b1c7f5c2a10",
  scopes: ["read:orders", "write:checkouts"],
  ttlSeconds: 3600,
  role: "customer",
  sessionId: "ses_01jd4x8m6ffq2b3n5r7t9v1w3c",
  customerId: "cus_01jd4x8m6ffq2b3n5r7t9v1w3b"
}

// --- (a) round trip ----------------------------------------------------------------------------------

const arbInput: fc.Arbitrary<IssueInput> = fc
  .record({
    subject: fc.string({ unit: "grapheme", minLength: 1, maxLength: 30 }),
    tokenId: fc.uuid(),
    scopes: fc.subarray([ADMIN_SCOPE, ...ALL_SCOPES]),
    ttlSeconds: fc.integer({ min: 1, max: 7200 }),
    role: fc.option(fc.constantFrom("admin" as const, "customer" as const), { nil: undefined }),
    sessionId: fc.option(fc.string({ unit: "grapheme", minLength: 1, maxLength: 30 }), { nil: undefined }),
    customerId: fc.option(fc.string({ unit: "grapheme", minLength: 1, maxLength: 30 }), { nil: undefined })
  })
  .map(({ role, sessionId, customerId, ...rest }) => ({
    ...rest,
    ...(role === undefined ? {} : { role }),
    ...(sessionId === undefined ? {} : { sessionId }),
    ...(customerId === undefined ? {} : { customerId })
  }))

describe("access tokens: issue → verify", () => {
  it("round-trips sub, jti, scopes, role, sid and cus", async () => {
    const issued = await issueAt(NOW_MS, userInput)
    expect(issued.issuedAt).toEqual(new Date(NOW_S * 1000))
    expect(issued.expiresAt).toEqual(new Date((NOW_S + 3600) * 1000))
    const exit = await verifyAt(NOW_MS, issued.token)
    expect(exit).toEqual(
      Exit.succeed({
        sub: userInput.subject,
        jti: userInput.tokenId,
        scopes: ["read:orders", "write:checkouts"],
        role: "customer",
        sid: userInput.sessionId,
        cus: userInput.customerId,
        iat: NOW_S,
        exp: NOW_S + 3600
      })
    )
    const [header] = issued.token.split(".")
    expect(JSON.parse(Buffer.from(header ?? "", "base64url").toString())).toEqual(HS256_HEADER)
  })

  it("a client token has no role, sid or cus; no scopes round-trip to []", async () => {
    const issued = await issueAt(NOW_MS, {
      subject: "cli_01jd4x8m6ffq2b3n5r7t9v1w3e",
      tokenId: "t-1",
      scopes: [],
      ttlSeconds: 7200
    })
    const exit = await verifyAt(NOW_MS, issued.token)
    expect(exit).toEqual(
      Exit.succeed({
        sub: "cli_01jd4x8m6ffq2b3n5r7t9v1w3e",
        jti: "t-1",
        scopes: [],
        iat: NOW_S,
        exp: NOW_S + 7200
      })
    )
  })

  it("property: every issued token verifies to the claims it was issued with", async () => {
    await fc.assert(
      fc.asyncProperty(arbInput, fc.integer({ min: 0, max: 4_102_444_800_000 }), async (input, nowMs) => {
        const issued = await issueAt(nowMs, input)
        const iat = Math.floor(nowMs / 1000)
        expect(issued.issuedAt.getTime()).toBe(iat * 1000)
        expect(issued.expiresAt.getTime()).toBe((iat + input.ttlSeconds) * 1000)
        const exit = await verifyAt(nowMs, issued.token)
        expect(exit).toEqual(
          Exit.succeed({
            sub: input.subject,
            jti: input.tokenId,
            scopes: [...input.scopes],
            iat,
            exp: iat + input.ttlSeconds,
            ...(input.role === undefined ? {} : { role: input.role }),
            ...(input.sessionId === undefined ? {} : { sid: input.sessionId }),
            ...(input.customerId === undefined ? {} : { cus: input.customerId })
          })
        )
      }),
      { numRuns: 100 }
    )
  })
})

// --- (b) expiry --------------------------------------------------------------------------------------

describe("access tokens: expiry follows Effect's Clock", () => {
  it.effect("valid until the second before exp, expired from exp on (TestClock)", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW_MS)
      const issued = yield* tokens.issue(userInput)
      expect(issued.expiresAt.getTime()).toBe(NOW_MS + 3_600_000)

      yield* TestClock.adjust(Duration.millis(3_599_999))
      const claims = yield* tokens.verify(issued.token)
      expect(claims.jti).toBe(userInput.tokenId)

      yield* TestClock.adjust(Duration.millis(1))
      const atExp = yield* Effect.flip(tokens.verify(issued.token))
      expect(atExp).toEqual(new InvalidAccessToken({ reason: "expired" }))

      yield* TestClock.adjust(Duration.days(365))
      const later = yield* Effect.flip(tokens.verify(issued.token))
      expect(later.reason).toBe("expired")
    })
  )

  it("property: verify succeeds strictly before exp and is expired at or after it", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 7200 }),
        fc.integer({ min: 0, max: 10_000_000 }),
        async (ttlSeconds, offsetMs) => {
          const issued = await issueAt(NOW_MS, { ...userInput, ttlSeconds })
          const at = NOW_S * 1000 + offsetMs
          const exit = await verifyAt(at, issued.token)
          if (at < issued.expiresAt.getTime()) expect(Exit.isSuccess(exit)).toBe(true)
          else expect(reasonOf(exit)).toBe("expired")
        }
      ),
      { numRuns: 100 }
    )
  })

  it("an expired token that is also forged or from another issuer is invalid, not expired", async () => {
    const late = NOW_MS + 10 * 3_600_000
    const foreign = handBuilt(HS256_HEADER, validClaims(), (input) => hs256(input, randomBytes(32)))
    expect(reasonOf(await verifyAt(late, foreign))).toBe("invalid")
    const wrongIssuer = handBuilt(HS256_HEADER, validClaims({ iss: "someone-else" }))
    expect(reasonOf(await verifyAt(late, wrongIssuer))).toBe("invalid")
  })
})

// --- (c) tampering and forgery -----------------------------------------------------------------------

const BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

describe("access tokens: tampering and forgery", () => {
  it("property: replacing any one character of the header, payload or signature is invalid", async () => {
    const issued = await issueAt(NOW_MS, userInput)
    const original = await verifyAt(NOW_MS, issued.token)
    expect(Exit.isSuccess(original)).toBe(true)
    const segments = issued.token.split(".")
    expect(segments).toHaveLength(3)
    const [, , signature = ""] = segments
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 2 }),
        fc.nat(),
        fc.oneof(
          { weight: 4, arbitrary: fc.constantFrom(...BASE64URL) },
          { weight: 1, arbitrary: fc.constantFrom("+", "/", "=", ".", " ", "%", "\n", "é") }
        ),
        async (segment, position, replacement) => {
          const text = segments[segment] ?? ""
          const index = position % text.length
          fc.pre(text[index] !== replacement)
          const changed = `${text.slice(0, index)}${replacement}${text.slice(index + 1)}`
          const tampered = segments.map((s, i) => (i === segment ? changed : s)).join(".")
          const exit = await verifyAt(NOW_MS, tampered)
          if (
            segment === 2 &&
            index === signature.length - 1 &&
            BASE64URL.includes(replacement) &&
            Buffer.from(changed, "base64url").equals(Buffer.from(signature, "base64url"))
          ) {
            // A 32-byte HMAC is 43 base64url characters: the last one carries 2 unused bits, so a
            // few substitutions there decode to the very same signature (base64 malleability).
            // Whatever the verdict, it can never yield different claims.
            if (Exit.isSuccess(exit)) expect(exit).toEqual(original)
            else expect(reasonOf(exit)).toBe("invalid")
          } else {
            expect(reasonOf(exit)).toBe("invalid")
          }
        }
      ),
      { numRuns: 300 }
    )
  })

  it("every replacement of the signature's last character: invalid unless it decodes to the same bytes", async () => {
    const issued = await issueAt(NOW_MS, userInput)
    const cut = issued.token.length - 1
    const signature = issued.token.slice(issued.token.lastIndexOf(".") + 1)
    const original = await verifyAt(NOW_MS, issued.token)
    expect(Exit.isSuccess(original)).toBe(true)
    let malleable = 0
    for (const c of BASE64URL) {
      if (c === issued.token[cut]) continue
      const changed = `${signature.slice(0, -1)}${c}`
      const sameBytes = Buffer.from(changed, "base64url").equals(Buffer.from(signature, "base64url"))
      const exit = await verifyAt(NOW_MS, `${issued.token.slice(0, cut)}${c}`)
      if (sameBytes) {
        // The unused low bits of the last character (base64 malleability, accepted by jose on
        // Node 20): the same signature, so at worst the very same claims.
        if (Exit.isSuccess(exit)) expect(exit).toEqual(original)
        else expect(reasonOf(exit)).toBe("invalid")
        malleable += 1
      } else {
        expect(reasonOf(exit)).toBe("invalid")
      }
    }
    expect(malleable).toBeLessThanOrEqual(3)
  })

  it("every payload character flip is invalid (exhaustive)", async () => {
    const issued = await issueAt(NOW_MS, userInput)
    const [header = "", payload = "", signature = ""] = issued.token.split(".")
    for (let i = 0; i < payload.length; i++) {
      const c = payload[i] === "A" ? "B" : "A"
      const tampered = `${header}.${payload.slice(0, i)}${c}${payload.slice(i + 1)}.${signature}`
      expect(reasonOf(await verifyAt(NOW_MS, tampered))).toBe("invalid")
    }
  })

  it("a token signed with another key is invalid", async () => {
    const other = makeAccessTokens(randomBytes(32))
    const issued = await Effect.runPromise(other.issue(userInput).pipe(Effect.withClock(fixedClock(NOW_MS))))
    expect(reasonOf(await verifyAt(NOW_MS, issued.token))).toBe("invalid")
  })

  it("alg none (unsigned) is invalid, with or without a signature segment", async () => {
    const unsigned = handBuilt({ alg: "none", typ: "JWT" }, validClaims(), () => "")
    expect(unsigned.endsWith(".")).toBe(true)
    expect(reasonOf(await verifyAt(NOW_MS, unsigned))).toBe("invalid")
    for (const alg of ["none", "None", "NONE"]) {
      const withSignature = handBuilt({ alg, typ: "JWT" }, validClaims())
      expect(reasonOf(await verifyAt(NOW_MS, withSignature))).toBe("invalid")
    }
    const noAlg = handBuilt({ typ: "JWT" }, validClaims())
    expect(reasonOf(await verifyAt(NOW_MS, noAlg))).toBe("invalid")
  })

  it("HS512 with the same key is invalid (the algorithm is pinned)", async () => {
    const token = await new SignJWT(validClaims()).setProtectedHeader({ alg: "HS512", typ: "JWT" }).sign(key)
    expect(reasonOf(await verifyAt(NOW_MS, token))).toBe("invalid")
    const hs384 = await new SignJWT(validClaims()).setProtectedHeader({ alg: "HS384" }).sign(key)
    expect(reasonOf(await verifyAt(NOW_MS, hs384))).toBe("invalid")
  })

  it("RS256-headed tokens are invalid: properly signed, or HMAC-signed with the secret (key confusion)", async () => {
    const { privateKey } = await generateKeyPair("RS256")
    const rs256 = await new SignJWT(validClaims())
      .setProtectedHeader({ alg: "RS256", typ: "JWT" })
      .sign(privateKey)
    expect(reasonOf(await verifyAt(NOW_MS, rs256))).toBe("invalid")
    const confused = handBuilt({ alg: "RS256", typ: "JWT" }, validClaims())
    expect(reasonOf(await verifyAt(NOW_MS, confused))).toBe("invalid")
  })

  it("a correctly signed hand-built token verifies (the helpers are sound)", async () => {
    const exit = await verifyAt(NOW_MS, handBuilt(HS256_HEADER, validClaims()))
    expect(exit).toEqual(
      Exit.succeed({
        sub: "usr_01jd4x8m6ffq2b3n5r7t9v1w3a",
        jti: "5b1e6f0e-7d0f-4f43-9d5e-3b1c7f5c2a10",
        scopes: ["read:orders"],
        role: "customer",
        iat: NOW_S,
        exp: NOW_S + 3600
      })
    )
  })

  it("wrong or missing issuer is invalid", async () => {
    for (const iss of ["commerce-platform2", "Commerce-Platform", "", ["commerce-platform"], null]) {
      expect(reasonOf(await verifyAt(NOW_MS, handBuilt(HS256_HEADER, validClaims({ iss }))))).toBe("invalid")
    }
    const { iss: _iss, ...withoutIssuer } = validClaims()
    expect(reasonOf(await verifyAt(NOW_MS, handBuilt(HS256_HEADER, withoutIssuer)))).toBe("invalid")
  })

  it("missing, empty or non-string sub / jti is invalid", async () => {
    const { sub: _sub, ...withoutSub } = validClaims()
    const { jti: _jti, ...withoutJti } = validClaims()
    const payloads: ReadonlyArray<unknown> = [
      withoutSub,
      withoutJti,
      validClaims({ sub: "" }),
      validClaims({ jti: "" }),
      validClaims({ sub: 42 }),
      validClaims({ jti: ["a"] }),
      validClaims({ sub: null })
    ]
    for (const payload of payloads) {
      expect(reasonOf(await verifyAt(NOW_MS, handBuilt(HS256_HEADER, payload)))).toBe("invalid")
    }
  })

  it("missing or non-numeric iat / exp, and a future nbf, are invalid", async () => {
    const { iat: _iat, ...withoutIat } = validClaims()
    const { exp: _exp, ...withoutExp } = validClaims()
    const payloads: ReadonlyArray<unknown> = [
      withoutIat,
      withoutExp,
      validClaims({ iat: String(NOW_S) }),
      validClaims({ exp: String(NOW_S + 3600) }),
      validClaims({ nbf: NOW_S + 60 })
    ]
    for (const payload of payloads) {
      expect(reasonOf(await verifyAt(NOW_MS, handBuilt(HS256_HEADER, payload)))).toBe("invalid")
    }
  })

  it("a role other than admin or customer is invalid", async () => {
    for (const role of ["superuser", "Admin", "", 1, null, ["admin"], { admin: true }]) {
      expect(reasonOf(await verifyAt(NOW_MS, handBuilt(HS256_HEADER, validClaims({ role }))))).toBe("invalid")
    }
    const admin = await verifyAt(NOW_MS, handBuilt(HS256_HEADER, validClaims({ role: "admin" })))
    expect(Exit.isSuccess(admin) && admin.value.role).toBe("admin")
  })

  it("a payload that is not a JSON object is invalid", async () => {
    const header = b64url(JSON.stringify(HS256_HEADER))
    for (const raw of ["[]", "null", "42", '"str"', "{", "\u00ff\u00fe"]) {
      const input = `${header}.${b64url(raw)}`
      expect(reasonOf(await verifyAt(NOW_MS, `${input}.${hs256(input)}`))).toBe("invalid")
    }
  })
})

// --- (d) arbitrary input never dies ------------------------------------------------------------------

const arbB64Segment = fc.oneof(
  fc.string({ unit: fc.constantFrom(...BASE64URL), maxLength: 60 }),
  fc.base64String({ maxLength: 60 }),
  fc.jsonValue().map((v) => b64url(JSON.stringify(v) ?? ""))
)

/** A claim that is present (with probability 1 - 1/freq) and usually, but not always, well-formed. */
const claim = <A>(wellFormed: fc.Arbitrary<A>, freq: number) =>
  fc.option(
    fc.oneof({ weight: 5, arbitrary: wellFormed }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) }),
    { nil: undefined, freq }
  )

/** Claims that are sometimes well-formed and sometimes anything at all. */
const arbClaims: fc.Arbitrary<Record<string, unknown>> = fc
  .record({
    iss: claim(fc.constant(ISSUER), 20),
    sub: claim(fc.string({ minLength: 1, maxLength: 10 }), 20),
    jti: claim(fc.string({ minLength: 1, maxLength: 10 }), 20),
    iat: claim(fc.integer({ min: 0, max: 2 * NOW_S }), 20),
    exp: claim(
      fc.oneof(
        { weight: 5, arbitrary: fc.integer({ min: NOW_S - 50, max: NOW_S + 200 }) },
        // JSON has no infinities (they would be encoded as null): finite doubles only.
        { weight: 1, arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }) }
      ),
      20
    ),
    nbf: claim(fc.integer({ min: NOW_S - 200, max: NOW_S + 20 }), 2),
    scope: claim(fc.string({ unit: fc.constantFrom("a", ":", " "), maxLength: 12 }), 2),
    role: claim(fc.constantFrom("admin", "customer", "customer", "root"), 2),
    sid: claim(fc.string({ maxLength: 5 }), 2),
    cus: claim(fc.string({ maxLength: 5 }), 2)
  })
  .map((claims) => Object.fromEntries(Object.entries(claims).filter(([, value]) => value !== undefined)))

/** What verification must answer for a correctly signed HS256 token with these claims. */
const expectedFor = (claims: Record<string, unknown>): Exit.Exit<AccessClaims, InvalidAccessToken> => {
  const invalid = Exit.fail(new InvalidAccessToken({ reason: "invalid" }))
  if (!["iss", "sub", "jti", "iat", "exp"].every((name) => Object.hasOwn(claims, name))) return invalid
  const { iss, sub, jti, iat, exp, nbf, scope, role, sid, cus } = claims
  if (iss !== ISSUER || typeof iat !== "number") return invalid
  if (nbf !== undefined && (typeof nbf !== "number" || nbf > NOW_S)) return invalid
  if (typeof exp !== "number") return invalid
  if (exp <= NOW_S) return Exit.fail(new InvalidAccessToken({ reason: "expired" }))
  if (typeof sub !== "string" || sub === "" || typeof jti !== "string" || jti === "") return invalid
  if (role !== undefined && role !== "admin" && role !== "customer") return invalid
  return Exit.succeed({
    sub,
    jti,
    scopes: (typeof scope === "string" ? scope : "").split(" ").filter((s) => s !== ""),
    iat,
    exp,
    ...(role === undefined ? {} : { role }),
    ...(typeof sid === "string" && sid !== "" ? { sid } : {}),
    ...(typeof cus === "string" && cus !== "" ? { cus } : {})
  })
}

describe("access tokens: arbitrary input", () => {
  it("property: any string fails with InvalidAccessToken invalid, never a defect", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string(),
          fc.string({ unit: "binary", maxLength: 200 }),
          fc.tuple(arbB64Segment, arbB64Segment, arbB64Segment).map((parts) => parts.join(".")),
          fc.array(arbB64Segment, { maxLength: 6 }).map((parts) => parts.join(".")),
          fc
            .tuple(arbClaims, fc.uint8Array({ maxLength: 64 }))
            .map(
              ([claims, sig]) =>
                `${b64url(JSON.stringify(HS256_HEADER))}.${b64url(JSON.stringify(claims))}.${b64url(sig)}`
            )
        ),
        async (token) => {
          const exit = await verifyAt(NOW_MS, token)
          expect(reasonOf(exit)).toBe("invalid")
        }
      ),
      { numRuns: 300 }
    )
  })

  it("property: correctly signed tokens with arbitrary claims give exactly the expected verdict", async () => {
    await fc.assert(
      fc.asyncProperty(arbClaims, async (claims) => {
        const exit = await verifyAt(NOW_MS, handBuilt(HS256_HEADER, claims))
        if (Exit.isFailure(exit)) failureOf(exit) // never a defect
        expect(exit).toEqual(expectedFor(claims))
      }),
      { numRuns: 300 }
    )
  })

  it("property: arbitrary JSON headers signed with the key never die", async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue(), async (header) => {
        const exit = await verifyAt(NOW_MS, handBuilt(header, validClaims()))
        if (Exit.isFailure(exit)) expect(reasonOf(exit)).toBe("invalid")
      }),
      { numRuns: 200 }
    )
  })
})

// --- (e) refresh and reset token formats ------------------------------------------------------------

const CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

/** An independent statement of the format: prefix + 26-character id suffix + 43 base62 characters. */
const suffixIfWellFormed = (prefix: string, token: string): string | undefined => {
  if (!token.startsWith(prefix)) return undefined
  const body = token.slice(prefix.length)
  if (body.length !== 26 + 43) return undefined
  const chars = [...body]
  if (chars.length !== body.length) return undefined
  const [first = "", ...rest] = chars.slice(0, 26)
  if (!"01234567".includes(first) || first === "") return undefined
  if (!rest.every((c) => CROCKFORD.includes(c))) return undefined
  if (!chars.slice(26).every((c) => BASE62.includes(c))) return undefined
  return body.slice(0, 26)
}

const suffixOf = (id: string) => id.slice(id.indexOf("_") + 1)

const formats = [
  { name: "refresh", prefix: "rt_", idPrefix: "ses", parse: parseRefreshToken },
  { name: "reset", prefix: "prt_", idPrefix: "usr", parse: parseResetToken }
] as const

/** Single-character edits and other near misses of a well-formed token. */
const arbMutation = (token: string): fc.Arbitrary<string> =>
  fc.oneof(
    fc
      .tuple(fc.nat(token.length - 1), fc.constantFrom(..."0189aijlouzAIOUZ_-. \n+/é"))
      .map(([i, c]) => `${token.slice(0, i)}${c}${token.slice(i + 1)}`),
    fc.nat(token.length - 1).map((i) => `${token.slice(0, i)}${token.slice(i + 1)}`),
    fc
      .tuple(fc.nat(token.length), fc.constantFrom(..."0aZ_ \n"))
      .map(([i, c]) => `${token.slice(0, i)}${c}${token.slice(i)}`),
    fc.constantFrom(
      `${token}\n`,
      ` ${token}`,
      token.toUpperCase(),
      token.replace(/^(p?rt)_/, "$1-"),
      `x${token}`,
      token.slice(0, -1)
    )
  )

describe("refresh and reset token formats", () => {
  for (const format of formats) {
    it.effect(`${format.name}: a token built from a fresh id parses back to that id`, () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW_MS)
        const id = yield* Ids.make(format.idPrefix)
        const token = `${format.prefix}${suffixOf(id)}${randomBase62()}`
        expect(format.parse(token)).toBe(id)
        // The other format does not accept it.
        const other = formats.find((f) => f.name !== format.name)
        expect(other?.parse(token)).toBeUndefined()
      })
    )

    it(`${format.name}: property: ids at any time round-trip`, () => {
      fc.assert(
        fc.property(fc.integer({ min: 0, max: 2 ** 48 - 1 }), (ms) => {
          const id = Ids.fromUuid(format.idPrefix, uuidv7FromMillis(ms))
          const token = `${format.prefix}${suffixOf(id)}${randomBase62()}`
          expect(format.parse(token)).toBe(id)
          expect(Ids.isValid(format.idPrefix, format.parse(token) ?? "")).toBe(true)
        }),
        { numRuns: 100 }
      )
    })

    it(`${format.name}: property: arbitrary strings never throw and parse only in the exact format`, () => {
      const valid = `${format.prefix}${suffixOf(Ids.fromUuid(format.idPrefix, uuidv7FromMillis(NOW_MS)))}${randomBase62()}`
      fc.assert(
        fc.property(
          fc.oneof(
            fc.string(),
            fc.string({ unit: "binary", maxLength: 100 }),
            fc
              .tuple(
                fc.string({
                  unit: fc.constantFrom(...CROCKFORD, "i", "l", "o", "u", "8"),
                  minLength: 24,
                  maxLength: 28
                }),
                fc.string({ unit: fc.constantFrom(...BASE62, "-", "_"), minLength: 41, maxLength: 45 })
              )
              .map(([id, secret]) => `${format.prefix}${id}${secret}`),
            arbMutation(valid)
          ),
          (token) => {
            const expected = suffixIfWellFormed(format.prefix, token)
            const parsed = format.parse(token)
            expect(parsed).toBe(expected === undefined ? undefined : `${format.idPrefix}_${expected}`)
          }
        ),
        { numRuns: 500 }
      )
    })
  }
})

// --- (f) passwords -----------------------------------------------------------------------------------

describe("passwordProblem", () => {
  it("8 to 128 characters", () => {
    expect(passwordProblem("a".repeat(7))).toBe("password must be at least 8 characters")
    expect(passwordProblem("a".repeat(8))).toBeUndefined()
    expect(passwordProblem("a".repeat(128))).toBeUndefined()
    expect(passwordProblem("a".repeat(129))).toBe("password must be at most 128 characters")
    expect(passwordProblem("")).toBe("password must be at least 8 characters")
    expect(PASSWORD_MAX_LENGTH).toBe(128)
  })

  it("refuses whitespace-only passwords, but whitespace inside is fine", () => {
    for (const blank of [" ".repeat(8), "\t\n\r \t\n\r ", "\u00a0".repeat(8), "\u3000".repeat(10)]) {
      expect(passwordProblem(blank)).toBe("password must not be only whitespace")
    }
    expect(passwordProblem(" ".repeat(7))).toBe("password must be at least 8 characters")
    expect(passwordProblem("  pass word  ")).toBeUndefined()
  })

  it("counts code points, not UTF-16 units", () => {
    const emoji = "😀" // two UTF-16 units
    expect(passwordProblem(emoji.repeat(7))).toBe("password must be at least 8 characters")
    expect(passwordProblem(emoji.repeat(8))).toBeUndefined()
    expect(passwordProblem(emoji.repeat(128))).toBeUndefined()
    expect(passwordProblem(emoji.repeat(129))).toBe("password must be at most 128 characters")
    expect(passwordProblem("é".repeat(8))).toBeUndefined()
    expect(passwordProblem(`${"a".repeat(127)}${emoji}`)).toBeUndefined()
  })

  it("property: acceptable exactly when 8..128 code points and not all whitespace", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 140 }), (password) => {
        const length = [...password].length
        const ok = length >= 8 && length <= 128 && password.trim() !== ""
        expect(passwordProblem(password) === undefined).toBe(ok)
      }),
      { numRuns: 300 }
    )
  })
})

describe("makePasswordHasher", () => {
  const cheap = { cost: 1024, blockSize: 8, parallelism: 1 }
  const hasher = makePasswordHasher(cheap)

  it.effect("hash records its parameters; verify accepts the password and rejects others", () =>
    Effect.gen(function* () {
      const stored = yield* hasher.hash("correct horse battery")
      expect(stored).toMatch(/^scrypt\$10\$8\$1\$[A-Za-z0-9+/]+={0,2}\$[A-Za-z0-9+/]+={0,2}$/)
      expect(yield* hasher.verify("correct horse battery", stored)).toBe(true)
      expect(yield* hasher.verify("correct horse batterY", stored)).toBe(false)
      expect(yield* hasher.verify("", stored)).toBe(false)
      // A fresh salt each time.
      const again = yield* hasher.hash("correct horse battery")
      expect(again).not.toBe(stored)
      expect(yield* hasher.verify("correct horse battery", again)).toBe(true)
    })
  )

  it.effect("passwords are compared after NFKC normalisation", () =>
    Effect.gen(function* () {
      const stored = yield* hasher.hash("caf\u00e9-password")
      expect(yield* hasher.verify("cafe\u0301-password", stored)).toBe(true)
    })
  )

  it.effect("a hash made with other parameters still verifies (they are stored in the hash)", () =>
    Effect.gen(function* () {
      const other = makePasswordHasher({ cost: 2048, blockSize: 4, parallelism: 2 })
      const stored = yield* other.hash("an older password")
      expect(stored.startsWith("scrypt$11$4$2$")).toBe(true)
      expect(yield* hasher.verify("an older password", stored)).toBe(true)
      expect(yield* hasher.verify("another password", stored)).toBe(false)
    })
  )

  it.effect("a stored hash that does not parse is no match, not an error", () =>
    Effect.gen(function* () {
      const good = yield* hasher.hash("password123")
      const [, , , , salt = "", derived = ""] = good.split("$")
      const malformed = [
        "",
        "garbage",
        "scrypt",
        "scrypt$",
        `bcrypt$10$8$1$${salt}$${derived}`,
        `scrypt$10$8$1$${salt}`,
        `scrypt$10$8$1$${salt}$${derived}$extra`,
        `scrypt$x$8$1$${salt}$${derived}`,
        `scrypt$10.5$8$1$${salt}$${derived}`,
        `scrypt$10$8$1$$`,
        `scrypt$10$8$1$${salt}$`,
        `scrypt$10$8$1$${salt}$${derived.slice(0, 10)}`,
        `scrypt$10$8$1$${salt}$${"A".repeat(derived.length)}`,
        `scrypt$10$8$1$${salt}$${derived}`.toUpperCase()
      ]
      for (const stored of malformed) {
        const exit = yield* Effect.exit(hasher.verify("password123", stored))
        expect(exit, stored).toEqual(Exit.succeed(false))
      }
    })
  )

  // Parameters scrypt refuses (r = 0, N = 1, N too large, negative r) make the hash unreadable.
  it.effect("a stored hash with parameters scrypt refuses is no match, not a defect", () =>
    Effect.gen(function* () {
      for (const stored of [
        "scrypt$$$$$",
        "scrypt$10$0$1$AAAA$AAAA",
        "scrypt$10$-8$1$AAAA$AAAA",
        "scrypt$40$8$1$AAAA$AAAA"
      ]) {
        const exit = yield* Effect.exit(hasher.verify("password123", stored))
        expect(exit, stored).toEqual(Exit.succeed(false))
      }
    })
  )

  it.effect("verifyNothing answers false", () =>
    Effect.gen(function* () {
      expect(yield* hasher.verifyNothing("password123")).toBe(false)
      expect(yield* hasher.verifyNothing("")).toBe(false)
    })
  )
})
