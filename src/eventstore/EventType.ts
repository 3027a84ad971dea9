/**
 * Event types are Schema definitions named `<aggregate>.<past_tense>` with a `schema_version`.
 * Older stored versions are upcast on read, never rewritten. Fields wrapped in `Personal(…)` are
 * encrypted per subject before they reach the database (crypto-shredding): after the subject is
 * forgotten they decode as `Shredded`, so replays and audits keep working.
 */
import { Effect, Either, ParseResult, Schema, SchemaAST } from "effect"
import { EventDecodeError, InvalidEventPayload } from "./errors.js"

const PersonalAnnotationId = Symbol.for("commerce-platform/PersonalData")

/** What a shredded personal field reads back as. */
export const Shredded = Schema.TaggedStruct("Shredded", {})
export type Shredded = typeof Shredded.Type
export const shredded: Shredded = { _tag: "Shredded" }

export const isShredded = (value: unknown): value is Shredded =>
  typeof value === "object" && value !== null && (value as { _tag?: unknown })._tag === "Shredded"

/** Marks a field as personal data: encrypted under the subject's key, `Shredded` once forgotten. */
export const Personal = <A, I, R>(schema: Schema.Schema<A, I, R>) =>
  Schema.Union(schema, Shredded).annotations({ [PersonalAnnotationId]: true })

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

const typeLiteralOf = (ast: SchemaAST.AST): SchemaAST.TypeLiteral | undefined => {
  if (SchemaAST.isTypeLiteral(ast)) return ast
  if (SchemaAST.isTransformation(ast)) return typeLiteralOf(ast.to)
  if (SchemaAST.isRefinement(ast)) return typeLiteralOf(ast.from)
  return undefined
}

/** Top-level keys of an event's data that hold personal data. */
export const personalKeys = (schema: Schema.Schema.AnyNoContext): ReadonlyArray<string> => {
  const literal = typeLiteralOf(schema.ast)
  if (!literal) return []
  return literal.propertySignatures
    .filter((p) => typeof p.name === "string" && isPersonalAst(p.type))
    .map((p) => p.name as string)
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
  /** The data subject whose key encrypts this event's personal fields. */
  readonly subject: ((data: A) => string) | undefined
  readonly make: (data: A) => DomainEvent<T, A>
  /** The schema's decoder, built once (decoding is on the hot path of loads, reads and rebuilds). */
  readonly decode: (data: unknown) => Either.Either<A, ParseResult.ParseError>
  /** Type guard over a union of domain events. */
  readonly is: (event: DomainEvent) => event is DomainEvent<T, A>
}

// biome-ignore lint/suspicious/noExplicitAny: a heterogeneous list of event types needs an existential
export type AnyEventType = EventType<string, any, any>

export type EventOf<E extends AnyEventType> =
  E extends EventType<infer T, infer A, infer _I> ? DomainEvent<T, A> : never

export const EVENT_TYPE_NAME = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$/

export const defineEvent = <T extends string, A, I>(
  type: T,
  options: {
    readonly schema: Schema.Schema<A, I>
    readonly version?: number
    readonly upcasters?: Readonly<Record<number, (data: unknown) => unknown>>
    readonly subject?: (data: A) => string
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
  return {
    type,
    version,
    schema: options.schema,
    upcasters,
    personalKeys: keys,
    subject: options.subject,
    make: (data) => ({ type, data }),
    decode: Schema.decodeUnknownEither(options.schema),
    is: (event): event is DomainEvent<T, A> => event.type === type
  }
}

/** Encodes data for storage (validating it), before encryption. */
export const encodeEventData = <T extends string, A, I>(eventType: EventType<T, A, I>, data: A) =>
  Schema.encode(eventType.schema)(data).pipe(
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
}
