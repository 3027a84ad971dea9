/**
 * Schema's encoders and decoders compiled once into plain functions, for the schemas a hot path
 * runs on every write and load (an event's data, a read model's state, an event's snapshot object).
 * Schema's own codec walks its AST through its generic parser for every value: a renewal spent ~8 %
 * of node's time there.
 *
 * The compiled codec handles what those schemas are made of: structs (required and optional
 * properties, defaults and renames, string-keyed records), arrays, literals, strings, numbers,
 * booleans, refinements (the filter still runs: `Schema.Int` still refuses 1.5), unions of literals
 * with one other member (`NullOr`), with structs told apart by a literal property, or with members
 * that do not overlap (a personal field's value or its `Shredded` marker), and `Schema.Date`. Any
 * other node is run by Schema itself. A value that does not fit the schema anywhere is handed to
 * Schema's codec whole, which answers its usual error: the answers (and the failures) are Schema's,
 * only faster (test/base/fast-encode.test.ts).
 */
import { Either, Option, ParseResult, Schema, type SchemaAST } from "effect"

/** What a compiled node answers for a value that does not fit it. */
const MISFIT: unique symbol = Symbol("misfit")
type Encode = (value: unknown) => unknown

/** `Schema.Date` is a refinement (a valid date) of this transformation: string ↔ Date. */
const DATE_FROM_STRING = Schema.DateFromString.ast

const isDateFromString = (ast: SchemaAST.Transformation) =>
  ast === DATE_FROM_STRING ||
  (DATE_FROM_STRING._tag === "Transformation" &&
    ast.from === DATE_FROM_STRING.from &&
    ast.to === DATE_FROM_STRING.to &&
    ast.transformation === DATE_FROM_STRING.transformation)

const encodeDate: Encode = (value) =>
  value instanceof Date && !Number.isNaN(value.getTime()) ? value.toISOString() : MISFIT

const decodeDate: Encode = (value) => (typeof value === "string" ? new Date(value) : MISFIT)

/** While `nodesLeftToSchema` compiles: the nodes left to Schema's own encoder. */
let leftToSchema: Array<string> | undefined

const isObject = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * The compiler of one direction. Encoding and decoding walk the same nodes; they differ at dates
 * (ISO text ↔ Date), at refinements (whose value the filter sees) and at renamed or defaulted
 * properties (which way a property transformation runs).
 */
const makeCompiler = (way: "encode" | "decode") => {
  /** Schema's own encoder (decoder) for one node, a failure answered as a misfit. */
  const bySchema = (ast: SchemaAST.AST): Encode => {
    leftToSchema?.push(String(ast))
    const encode = (way === "encode" ? ParseResult.encodeUnknownEither : ParseResult.decodeUnknownEither)(
      Schema.make(ast)
    )
    return (value) => {
      const result = encode(value)
      return result._tag === "Right" ? result.right : MISFIT
    }
  }

  const compileTypeLiteral = (ast: SchemaAST.TypeLiteral): Encode => {
    const [index, ...moreIndexes] = ast.indexSignatures
    if (moreIndexes.length > 0) return bySchema(ast)
    if (index !== undefined) {
      // A string-keyed record and nothing else (metadata).
      if (ast.propertySignatures.length > 0 || index.parameter._tag !== "StringKeyword") return bySchema(ast)
      const value = compile(index.type)
      return (input) => {
        if (!isObject(input)) return MISFIT
        const out: Record<string, unknown> = {}
        for (const key of Object.keys(input)) {
          const encoded = value(input[key])
          if (encoded === MISFIT) return MISFIT
          out[key] = encoded
        }
        return out
      }
    }
    const properties = ast.propertySignatures.map((p) => {
      if (typeof p.name !== "string") return undefined
      return { name: p.name, optional: p.isOptional, encode: compile(p.type) }
    })
    if (properties.some((p) => p === undefined)) return bySchema(ast)
    const props = properties.flatMap((p) => (p === undefined ? [] : [p]))
    return (input) => {
      if (!isObject(input)) return MISFIT
      const out: Record<string, unknown> = {}
      for (const p of props) {
        if (!Object.hasOwn(input, p.name)) {
          if (p.optional) continue
          return MISFIT
        }
        const encoded = p.encode(input[p.name])
        if (encoded === MISFIT) return MISFIT
        out[p.name] = encoded
      }
      return out
    }
  }

  /**
   * Members told apart by a property whose type is a literal in each (`type: "subscription"` or
   * `type: "usage"`): the member of the value's literal, as Schema's union picks it.
   */
  const compileTagged = (members: ReadonlyArray<SchemaAST.AST>): Encode | undefined => {
    const structs = members.flatMap((m) => (m._tag === "TypeLiteral" ? [m] : []))
    const [first] = structs
    if (first === undefined || structs.length !== members.length) return undefined
    for (const candidate of first.propertySignatures) {
      const name = candidate.name
      if (typeof name !== "string") continue
      const byTag = new Map<unknown, Encode>()
      for (const struct of structs) {
        const property = struct.propertySignatures.find((p) => p.name === name)
        if (property === undefined || property.isOptional || property.type._tag !== "Literal") break
        if (byTag.has(property.type.literal)) break
        byTag.set(property.type.literal, compile(struct))
      }
      if (byTag.size !== structs.length) continue
      return (value) => {
        if (!isObject(value)) return MISFIT
        const encode = byTag.get(value[name])
        return encode === undefined ? MISFIT : encode(value)
      }
    }
    return undefined
  }

  /**
   * Members that do not overlap (a personal field: its value, or the `Shredded` marker it becomes):
   * the first that fits, as Schema finds the one member a value belongs to.
   */
  const firstFit =
    (members: ReadonlyArray<Encode>): Encode =>
    (value) => {
      for (const member of members) {
        const encoded = member(value)
        if (encoded !== MISFIT) return encoded
      }
      return MISFIT
    }

  const compileUnion = (ast: SchemaAST.Union): Encode => {
    const literals = new Set<unknown>()
    let undefinedAllowed = false
    const others: Array<SchemaAST.AST> = []
    for (const member of ast.types) {
      if (member._tag === "Literal") literals.add(member.literal)
      else if (member._tag === "UndefinedKeyword") undefinedAllowed = true
      else others.push(member)
    }
    const [other, ...more] = others
    const encodeOther =
      other === undefined
        ? undefined
        : more.length === 0
          ? compile(other)
          : (compileTagged(others) ?? firstFit(others.map(compile)))
    return (value) => {
      if (literals.has(value)) return value
      if (value === undefined && undefinedAllowed) return undefined
      return encodeOther === undefined ? MISFIT : encodeOther(value)
    }
  }

  /**
   * A struct whose properties are renamed or defaulted (`Schema.optionalWith(…, { default })`): the
   * type side's required keys present, each property transformation's `encode` applied as Schema
   * applies it, then the encoded side's struct.
   */
  const compileStructTransformation = (
    ast: SchemaAST.Transformation,
    transformation: SchemaAST.TypeLiteralTransformation,
    to: SchemaAST.TypeLiteral
  ): Encode => {
    const required: Array<string> = []
    for (const p of to.propertySignatures) {
      if (typeof p.name !== "string") return bySchema(ast)
      if (!p.isOptional) required.push(p.name)
    }
    const moves: Array<{
      readonly from: string
      readonly to: string
      readonly encode: (o: Option.Option<unknown>) => Option.Option<unknown>
      readonly decode: (o: Option.Option<unknown>) => Option.Option<unknown>
    }> = []
    for (const t of transformation.propertySignatureTransformations) {
      if (typeof t.from !== "string" || typeof t.to !== "string") return bySchema(ast)
      moves.push({ from: t.from, to: t.to, encode: t.encode, decode: t.decode })
    }
    const from = compile(ast.from)
    if (way === "encode")
      return (value) => {
        if (!isObject(value)) return MISFIT
        for (const name of required) if (!Object.hasOwn(value, name)) return MISFIT
        const moved: Record<string, unknown> = { ...value }
        for (const m of moves) {
          const encoded = m.encode(Object.hasOwn(moved, m.to) ? Option.some(moved[m.to]) : Option.none())
          delete moved[m.to]
          if (Option.isSome(encoded)) moved[m.from] = encoded.value
        }
        return from(moved)
      }
    // Decoding: the encoded side's struct, each transformation's `decode`, then the type side's keys
    // in its order (as Schema's check of the type side leaves them).
    const order = to.propertySignatures.map((p) => p.name)
    return (value) => {
      const decoded = from(value)
      if (!isObject(decoded)) return MISFIT
      const moved: Record<string, unknown> = { ...decoded }
      for (const m of moves) {
        const result = m.decode(Object.hasOwn(moved, m.from) ? Option.some(moved[m.from]) : Option.none())
        delete moved[m.from]
        if (Option.isSome(result)) moved[m.to] = result.value
      }
      for (const name of required) if (!Object.hasOwn(moved, name)) return MISFIT
      const out: Record<string, unknown> = {}
      for (const name of order)
        if (typeof name === "string" && Object.hasOwn(moved, name)) out[name] = moved[name]
      return out
    }
  }

  const compile = (ast: SchemaAST.AST): Encode => {
    switch (ast._tag) {
      case "StringKeyword":
        return (value) => (typeof value === "string" ? value : MISFIT)
      case "NumberKeyword":
        return (value) => (typeof value === "number" ? value : MISFIT)
      case "BooleanKeyword":
        return (value) => (typeof value === "boolean" ? value : MISFIT)
      case "UnknownKeyword":
      case "AnyKeyword":
        return (value) => value
      case "Literal": {
        const literal = ast.literal
        return (value) => (value === literal ? value : MISFIT)
      }
      case "Refinement": {
        const from = compile(ast.from)
        return (value) => {
          const encoded = from(value)
          if (encoded === MISFIT) return MISFIT
          // The filter sees the type side's value: the input when encoding, the output when decoding.
          return Option.isSome(ast.filter(way === "encode" ? value : encoded, {}, ast)) ? MISFIT : encoded
        }
      }
      case "Transformation":
        if (isDateFromString(ast)) return way === "encode" ? encodeDate : decodeDate
        if (ast.transformation._tag === "TypeLiteralTransformation" && ast.to._tag === "TypeLiteral")
          return compileStructTransformation(ast, ast.transformation, ast.to)
        return bySchema(ast)
      case "TupleType": {
        const [rest, ...moreRest] = ast.rest
        if (ast.elements.length > 0 || rest === undefined || moreRest.length > 0) return bySchema(ast)
        const element = compile(rest.type)
        return (value) => {
          if (!Array.isArray(value)) return MISFIT
          const out = new Array<unknown>(value.length)
          for (let i = 0; i < value.length; i++) {
            const encoded = element(value[i])
            if (encoded === MISFIT) return MISFIT
            out[i] = encoded
          }
          return out
        }
      }
      case "TypeLiteral":
        return compileTypeLiteral(ast)
      case "Union":
        return compileUnion(ast)
      default:
        return bySchema(ast)
    }
  }

  return compile
}

const compileEncoder = makeCompiler("encode")
const compileDecoder = makeCompiler("decode")

/** `Schema.encodeSync(schema)`, compiled: the same answers, the same errors. */
export const fastEncodeSync = <A, I>(schema: Schema.Schema<A, I, never>): ((value: A) => I) => {
  const fast = compileEncoder(schema.ast)
  const slow = Schema.encodeSync(schema)
  return (value) => {
    const encoded = fast(value)
    // A misfit somewhere: Schema's own encoder, for its error.
    return encoded === MISFIT ? slow(value) : (encoded as I)
  }
}

/** `Schema.encodeEither(schema)`, compiled: the same answers, the same `ParseError`s. */
export const fastEncodeEither = <A, I>(
  schema: Schema.Schema<A, I, never>
): ((value: A) => Either.Either<I, ParseResult.ParseError>) => {
  const fast = compileEncoder(schema.ast)
  const slow = Schema.encodeEither(schema)
  return (value) => {
    const encoded = fast(value)
    return encoded === MISFIT ? slow(value) : Either.right(encoded as I)
  }
}

/** The nodes of `schema` its compiled encoder leaves to Schema's (for tests: none on a hot path). */
export const nodesLeftToSchema = (schema: Schema.Schema.AnyNoContext): ReadonlyArray<string> => {
  const left: Array<string> = []
  leftToSchema = left
  try {
    compileEncoder(schema.ast)
  } finally {
    leftToSchema = undefined
  }
  return left
}

/** `Schema.decodeUnknownEither(schema)`, compiled: the same answers, the same `ParseError`s. */
export const fastDecodeUnknownEither = <A, I>(
  schema: Schema.Schema<A, I, never>
): ((value: unknown) => Either.Either<A, ParseResult.ParseError>) => {
  const fast = compileDecoder(schema.ast)
  const slow = Schema.decodeUnknownEither(schema)
  return (value) => {
    const decoded = fast(value)
    return decoded === MISFIT ? slow(value) : Either.right(decoded as A)
  }
}

/** `Schema.decodeUnknownSync(schema)`, compiled: the same answers, the same errors. */
export const fastDecodeUnknownSync = <A, I>(schema: Schema.Schema<A, I, never>): ((value: unknown) => A) => {
  const fast = compileDecoder(schema.ast)
  const slow = Schema.decodeUnknownSync(schema)
  return (value) => {
    const decoded = fast(value)
    return decoded === MISFIT ? slow(value) : (decoded as A)
  }
}
