/**
 * Event types are Schema definitions named `<aggregate>.<past_tense>` with a `schema_version`.
 * Older stored versions are upcast on read, never rewritten. Fields wrapped in `Personal(…)` are
 * encrypted per subject before they reach the database (crypto-shredding): after the subject is
 * forgotten they decode as `Shredded`, so replays and audits keep working. Fields wrapped in
 * `Secret(…)` (password and key hashes, signing secrets, tokens) stay readable inside the process but
 * leave it only as `"[secret]"`: every outward view of stored events (the audit feed and export)
 * goes through `redactSecrets`. The two compose: `Secret(Personal(…))` is both.
 */
import { Context, Effect, Either, Layer, ParseResult, Schema, SchemaAST } from "effect"
import { fastDecodeUnknownEither, fastEncodeEither } from "../base/FastEncode.js"
import { EventDecodeError, InvalidEventPayload } from "./errors.js"

const PersonalAnnotationId = Symbol.for("commerce-platform/PersonalData")
const SecretAnnotationId = Symbol.for("commerce-platform/Secret")

/** What a secret field reads as once it leaves the process. */
export const REDACTED_SECRET = "[secret]"

/** What a shredded personal field reads back as. */
export const Shredded = Schema.TaggedStruct("Shredded", {})
export type Shredded = typeof Shredded.Type
export const shredded: Shredded = { _tag: "Shredded" }

export const isShredded = (value: unknown): value is Shredded =>
  typeof value === "object" && value !== null && (value as { _tag?: unknown })._tag === "Shredded"

/** Marks a field as personal data: encrypted under the subject's key, `Shredded` once forgotten. */
export const Personal = <A, I, R>(schema: Schema.Schema<A, I, R>) =>
  Schema.Union(schema, Shredded).annotations({ [PersonalAnnotationId]: true })

/**
 * Marks a field as a secret (a credential or what verifies one): readable by deciders, projections
 * and the webhook signer, but written as `"[secret]"` wherever stored events leave the process.
 * Only top-level fields of an event's data may be secret (`defineEvent` refuses a nested one). A
 * secret that fails its schema is reported without its value (parse errors end up in logs).
 */
export const Secret = <A, I, R>(schema: Schema.Schema<A, I, R>) =>
  schema.annotations({
    [SecretAnnotationId]: true,
    // A value that fails its schema is not quoted in the error (errors are logged).
    message: () => ({ message: "a secret (its value is not shown)", override: true })
  })

/** The value of a personal field, or `fallback` once it was shredded. */
export const revealOr = <A, B>(value: A | Shredded, fallback: B): A | B =>
  isShredded(value) ? fallback : value

const isPersonalAst = (ast: SchemaAST.AST): boolean => {
  if (SchemaAST.getAnnotation(ast, PersonalAnnotationId)._tag === "Some") return true
  if (SchemaAST.isUnion(ast)) return ast.types.some(isPersonalAst)
  if (SchemaAST.isRefinement(ast)) return isPersonalAst(ast.from)
  if (SchemaAST.isTransformation(ast)) return isPersonalAst(ast.to)
  return false
}

const isSecretAst = (ast: SchemaAST.AST): boolean => {
  if (SchemaAST.getAnnotation(ast, SecretAnnotationId)._tag === "Some") return true
  if (SchemaAST.isUnion(ast)) return ast.types.some(isSecretAst)
  if (SchemaAST.isRefinement(ast)) return isSecretAst(ast.from)
  if (SchemaAST.isTransformation(ast)) return isSecretAst(ast.from) || isSecretAst(ast.to)
  return false
}

/** Whether a secret marker sits anywhere below the top level (where redaction would not reach it). */
const hasNestedSecret = (ast: SchemaAST.AST, seen: Set<SchemaAST.AST> = new Set()): boolean => {
  if (seen.has(ast)) return false
  seen.add(ast)
  if (SchemaAST.getAnnotation(ast, SecretAnnotationId)._tag === "Some") return true
  switch (ast._tag) {
    case "Union":
      return ast.types.some((t) => hasNestedSecret(t, seen))
    case "Refinement":
      return hasNestedSecret(ast.from, seen)
    case "Transformation":
      return hasNestedSecret(ast.from, seen) || hasNestedSecret(ast.to, seen)
    case "TypeLiteral":
      return (
        ast.propertySignatures.some((p) => hasNestedSecret(p.type, seen)) ||
        ast.indexSignatures.some((i) => hasNestedSecret(i.type, seen))
      )
    case "TupleType":
      return (
        ast.elements.some((e) => hasNestedSecret(e.type, seen)) ||
        ast.rest.some((r) => hasNestedSecret(r.type, seen))
      )
    case "Suspend":
      return hasNestedSecret(ast.f(), seen)
    default:
      return false
  }
}

const typeLiteralOf = (ast: SchemaAST.AST): SchemaAST.TypeLiteral | undefined => {
  if (SchemaAST.isTypeLiteral(ast)) return ast
  if (SchemaAST.isTransformation(ast)) return typeLiteralOf(ast.to)
  if (SchemaAST.isRefinement(ast)) return typeLiteralOf(ast.from)
  return undefined
}

/** Top-level keys of an event's data whose schema is marked as `marked` says. */
const keysMarked =
  (marked: (ast: SchemaAST.AST) => boolean) =>
  (schema: Schema.Schema.AnyNoContext): ReadonlyArray<string> => {
    const literal = typeLiteralOf(schema.ast)
    if (!literal) return []
    return literal.propertySignatures.flatMap((p) =>
      typeof p.name === "string" && marked(p.type) ? [p.name] : []
    )
  }

/** Top-level keys of an event's data that hold personal data. */
export const personalKeys = keysMarked(isPersonalAst)

/** Top-level keys of an event's data that hold secrets. */
export const secretKeys = keysMarked(isSecretAst)

/** Secret markers below the top level of an event's data (which redaction would not reach). */
const nestedSecrets = (schema: Schema.Schema.AnyNoContext): boolean => {
  const literal = typeLiteralOf(schema.ast)
  if (!literal) return hasNestedSecret(schema.ast)
  return literal.propertySignatures.some((p) => {
    if (isSecretAst(p.type)) return false
    return hasNestedSecret(p.type)
  })
}

/** A decided domain event: its type name and its (decoded) data. */
export interface DomainEvent<T extends string = string, A = unknown> {
  readonly type: T
  readonly data: A
}

export interface EventType<T extends string, A, I> {
  readonly type: T
  /** Current schema version written for new events. */
  readonly version: number
  readonly schema: Schema.Schema<A, I>
  /** Upcasters keyed by the version they upgrade *from* (n → n + 1), applied to stored JSON. */
  readonly upcasters: Readonly<Record<number, (data: unknown) => unknown>>
  readonly personalKeys: ReadonlyArray<string>
  /** Top-level keys of the data that are `Secret`: `"[secret]"` wherever stored events leave the process. */
  readonly secretKeys: ReadonlyArray<string>
  /** The data subject whose key encrypts this event's personal fields. */
  readonly subject: ((data: A) => string) | undefined
  readonly make: (data: A) => DomainEvent<T, A>
  /** The schema's decoder, built once (decoding is on the hot path of loads, reads and rebuilds). */
  readonly decode: (data: unknown) => Either.Either<A, ParseResult.ParseError>
  /** The schema's encoder, built once (every append encodes; a usage batch, 1,000 events). */
  readonly encode: (data: A) => Either.Either<I, ParseResult.ParseError>
  /** Type guard over a union of domain events. */
  readonly is: (event: DomainEvent) => event is DomainEvent<T, A>
}

// biome-ignore lint/suspicious/noExplicitAny: a heterogeneous list of event types needs an existential
export type AnyEventType = EventType<string, any, any>

export type EventOf<E extends AnyEventType> =
  E extends EventType<infer T, infer A, infer _I> ? DomainEvent<T, A> : never

export const EVENT_TYPE_NAME = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$/

/** A hand-written encoder as the schema's `encodeEither` answers (it cannot fail). */
const trusted =
  <A, I>(encode: (data: A) => I) =>
  (data: A): Either.Either<I, ParseResult.ParseError> =>
    Either.right(encode(data))

export const defineEvent = <T extends string, A, I>(
  type: T,
  options: {
    readonly schema: Schema.Schema<A, I>
    readonly version?: number
    readonly upcasters?: Readonly<Record<number, (data: unknown) => unknown>>
    readonly subject?: (data: A) => string
    /**
     * A hand-written encoder for an event type appended in bulk (a usage batch appends 1,000): the
     * schema's generic walk was a seventh of such a batch's CPU. It must answer what the schema's
     * encoder answers for every valid value (a property test checks it against the schema's
     * arbitrary values), so only a schema without refinements — nothing the encoder would have
     * to check — takes one.
     */
    readonly encode?: (data: A) => I
  }
): EventType<T, A, I> => {
  if (!EVENT_TYPE_NAME.test(type))
    throw new Error(`event type "${type}" must look like <aggregate>.<past_tense>`)
  const version = options.version ?? 1
  const upcasters = options.upcasters ?? {}
  for (let v = 1; v < version; v++) {
    if (!upcasters[v]) throw new Error(`event type ${type} v${version} has no upcaster from v${v}`)
  }
  const keys = personalKeys(options.schema)
  if (keys.length > 0 && !options.subject) {
    throw new Error(`event type ${type} has personal fields (${keys.join(", ")}) but no subject`)
  }
  if (nestedSecrets(options.schema)) {
    throw new Error(`event type ${type} marks a nested field Secret: only top-level fields may be`)
  }
  return {
    type,
    version,
    schema: options.schema,
    upcasters,
    personalKeys: keys,
    secretKeys: secretKeys(options.schema),
    subject: options.subject,
    make: (data) => ({ type, data }),
    decode: fastDecodeUnknownEither(options.schema),
    encode: options.encode === undefined ? fastEncodeEither(options.schema) : trusted(options.encode),
    is: (event): event is DomainEvent<T, A> => event.type === type
  }
}

/**
 * Stored data (decrypted, as stored: not upcast) as it may leave the process: every secret key that
 * holds a value reads `"[secret]"`; a shredded one stays `Shredded` (it holds nothing). Anything that
 * is not an object is returned as it is.
 */
export const redactSecrets = (keys: ReadonlyArray<string>, data: unknown): unknown => {
  if (keys.length === 0 || typeof data !== "object" || data === null || Array.isArray(data)) return data
  let out: Record<string, unknown> | undefined
  for (const key of keys) {
    if (!Object.hasOwn(data, key)) continue
    const value: unknown = Reflect.get(data, key)
    if (value === undefined || value === null || isShredded(value)) continue
    out ??= { ...data }
    out[key] = REDACTED_SECRET
  }
  return out ?? data
}

/** Encodes data for storage (validating it), before encryption: the event type's own encoder. */
export const encodeEventData = <T extends string, A, I>(eventType: EventType<T, A, I>, data: A) =>
  eventType.encode(data).pipe(
    Effect.mapError(
      (error) =>
        new InvalidEventPayload({
          eventType: eventType.type,
          message: ParseResult.TreeFormatter.formatErrorSync(error)
        })
    )
  )

/** Upcasts stored JSON to the current version and decodes it, synchronously. */
export const decodeEventDataEither = <T extends string, A, I>(
  eventType: EventType<T, A, I>,
  stored: { readonly eventId: string; readonly schemaVersion: number; readonly data: unknown }
): Either.Either<A, EventDecodeError> => {
  const fail = (message: string) =>
    Either.left(
      new EventDecodeError({
        eventId: stored.eventId,
        eventType: eventType.type,
        schemaVersion: stored.schemaVersion,
        message
      })
    )
  if (stored.schemaVersion > eventType.version) {
    return fail(
      `stored schema_version ${stored.schemaVersion} is newer than this code (${eventType.version})`
    )
  }
  let data = stored.data
  for (let v = stored.schemaVersion; v < eventType.version; v++) {
    const upcast = eventType.upcasters[v]
    if (!upcast) return fail(`no upcaster from v${v}`)
    data = upcast(data)
  }
  const decoded = eventType.decode(data)
  return Either.isRight(decoded)
    ? Either.right(decoded.right)
    : fail(ParseResult.TreeFormatter.formatErrorSync(decoded.left))
}

/** Upcasts stored JSON to the current version and decodes it. */
export const decodeEventData = <T extends string, A, I>(
  eventType: EventType<T, A, I>,
  stored: { readonly eventId: string; readonly schemaVersion: number; readonly data: unknown }
): Effect.Effect<A, EventDecodeError> => decodeEventDataEither(eventType, stored)

/** A lookup of event types by name, for decoding a feed that mixes aggregates. */
export class EventTypes {
  private readonly byType: ReadonlyMap<string, AnyEventType>
  constructor(readonly all: ReadonlyArray<AnyEventType>) {
    const map = new Map<string, AnyEventType>()
    for (const t of all) {
      const existing = map.get(t.type)
      if (existing && existing !== t) throw new Error(`event type ${t.type} is defined twice`)
      map.set(t.type, t)
    }
    this.byType = map
  }
  get(type: string): AnyEventType | undefined {
    return this.byType.get(type)
  }
  has(type: string): boolean {
    return this.byType.has(type)
  }
  get names(): ReadonlyArray<string> {
    return [...this.byType.keys()]
  }
  /** `data` of an event of `type` as it may leave the process (see `redactSecrets`). */
  redact(type: string, data: unknown): unknown {
    const eventType = this.byType.get(type)
    return eventType ? redactSecrets(eventType.secretKeys, data) : data
  }
}

/**
 * Every event type of the service (the registry's), for what shows stored events outside the process:
 * the audit feed and export redact secrets with it (`EventTypes.redact`). Provided by the composition.
 */
export class KnownEventTypes extends Context.Tag("KnownEventTypes")<KnownEventTypes, EventTypes>() {}

export const KnownEventTypesLive = (types: ReadonlyArray<AnyEventType>) =>
  Layer.sync(KnownEventTypes, () => new EventTypes(types))
