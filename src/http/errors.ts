/**
 * One error body for every failure on every surface (design/API.md):
 *   { "error": { "type", "code", "message", "param"?, "requestId" } }
 * Each status has its own tagged class, so handlers fail with a typed value; the `_tag` that tells
 * them apart is stripped from the wire body (and from the OpenAPI document), and `requestId` is
 * filled in by the HTTP middleware on the way out.
 */
import { HttpApiSchema } from "@effect/platform"
import { Effect, Schema } from "effect"

export const ErrorType = Schema.Literal(
  "invalid_request_error",
  "authentication_error",
  "card_error",
  "permission_error",
  "idempotency_error",
  "rate_limit_error",
  "api_error"
)
export type ErrorType = typeof ErrorType.Type

export const ErrorDetail = Schema.Struct({
  type: ErrorType,
  code: Schema.String,
  message: Schema.String,
  param: Schema.optional(Schema.String),
  declineCode: Schema.optional(Schema.String),
  /** The payment intent the error is about, as it now stands (Stripe embeds it in card errors). */
  paymentIntent: Schema.optional(Schema.Unknown),
  /** The payment the error is about, as it now stands. */
  payment: Schema.optional(Schema.Unknown),
  requestId: Schema.optional(Schema.String)
}).annotations({ identifier: "ErrorDetail" })
export type ErrorDetail = typeof ErrorDetail.Type

export interface ErrorInput {
  readonly code: string
  readonly message: string
  readonly param?: string
}

const detail = (type: ErrorType, input: ErrorInput): ErrorDetail => ({
  type,
  code: input.code,
  message: input.message,
  ...(input.param === undefined ? {} : { param: input.param })
})

const fields = { error: ErrorDetail }

export class BadRequest extends Schema.TaggedError<BadRequest>()(
  "BadRequest",
  fields,
  HttpApiSchema.annotations({ status: 400, description: "Invalid request" })
) {
  static of = (input: ErrorInput) => new BadRequest({ error: detail("invalid_request_error", input) })
}

export class Unauthorized extends Schema.TaggedError<Unauthorized>()(
  "Unauthorized",
  fields,
  HttpApiSchema.annotations({ status: 401, description: "Missing or invalid credentials" })
) {
  static of = (input: ErrorInput) => new Unauthorized({ error: detail("authentication_error", input) })
}

export class Forbidden extends Schema.TaggedError<Forbidden>()(
  "Forbidden",
  fields,
  HttpApiSchema.annotations({ status: 403, description: "The credential lacks the required scope" })
) {
  static of = (input: ErrorInput) => new Forbidden({ error: detail("permission_error", input) })
}

export class NotFound extends Schema.TaggedError<NotFound>()(
  "NotFound",
  fields,
  HttpApiSchema.annotations({ status: 404, description: "Resource not found" })
) {
  static of = (input: Partial<ErrorInput> = {}) =>
    new NotFound({
      error: detail("invalid_request_error", {
        code: input.code ?? "resource_missing",
        message: input.message ?? "No such resource",
        ...(input.param === undefined ? {} : { param: input.param })
      })
    })
}

export class Conflict extends Schema.TaggedError<Conflict>()(
  "Conflict",
  fields,
  HttpApiSchema.annotations({ status: 409, description: "Conflict with the current state" })
) {
  static of = (input: ErrorInput) => new Conflict({ error: detail("invalid_request_error", input) })
}

export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()(
  "PayloadTooLarge",
  fields,
  HttpApiSchema.annotations({ status: 413, description: "Request body over the limit" })
) {}

export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()(
  "UnsupportedMediaType",
  fields,
  HttpApiSchema.annotations({ status: 415, description: "Unsupported Content-Type" })
) {}

export class IdempotencyKeyReused extends Schema.TaggedError<IdempotencyKeyReused>()(
  "IdempotencyKeyReused",
  fields,
  HttpApiSchema.annotations({ status: 422, description: "Idempotency key reused with a different request" })
) {}

export class TooManyRequests extends Schema.TaggedError<TooManyRequests>()(
  "TooManyRequests",
  fields,
  HttpApiSchema.annotations({ status: 429, description: "Rate limit exceeded" })
) {
  static of = (input: ErrorInput) => new TooManyRequests({ error: detail("rate_limit_error", input) })
}

export class InternalError extends Schema.TaggedError<InternalError>()(
  "InternalError",
  fields,
  HttpApiSchema.annotations({ status: 500, description: "Internal error" })
) {}

export class ServiceUnavailable extends Schema.TaggedError<ServiceUnavailable>()(
  "ServiceUnavailable",
  fields,
  HttpApiSchema.annotations({
    status: 503,
    description: "Not ready, or the database cannot be reached (retry after Retry-After seconds)"
  })
) {}

/** The wire body, for responses built outside HttpApi (middleware, router fallbacks). */
export const ErrorBody = Schema.Struct({ error: ErrorDetail })
export type ErrorBody = typeof ErrorBody.Type

export const errorBody = (type: ErrorType, input: ErrorInput): ErrorBody => ({ error: detail(type, input) })

/** Seconds a client should wait before retrying while the database cannot be reached. */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 2

/** A request that failed because the database cannot be reached: not a bug, retry (503). */
export const UNAVAILABLE: ErrorInput = {
  code: "service_unavailable",
  message: "The service is temporarily unavailable (its database cannot be reached); retry later."
}

/** The 503 body of `UNAVAILABLE`. */
export const unavailableBody = (): ErrorBody => errorBody("api_error", UNAVAILABLE)

/** Default type for a status, used when normalizing responses that did not come from our classes. */
export const typeForStatus = (status: number): ErrorType => {
  switch (status) {
    case 401:
      return "authentication_error"
    case 402:
      return "card_error"
    case 403:
      return "permission_error"
    case 422:
      return "idempotency_error"
    case 429:
      return "rate_limit_error"
    default:
      return status >= 500 ? "api_error" : "invalid_request_error"
  }
}

const HTTP_ERROR_CLASSES = [
  BadRequest,
  Unauthorized,
  Forbidden,
  NotFound,
  Conflict,
  PayloadTooLarge,
  UnsupportedMediaType,
  IdempotencyKeyReused,
  TooManyRequests,
  InternalError,
  ServiceUnavailable
] as const

export type HttpError = InstanceType<(typeof HTTP_ERROR_CLASSES)[number]>

/** Each HTTP error's status, read once from its class's `HttpApiSchema` annotation. */
const HTTP_ERROR_STATUS: ReadonlyMap<string, number> = new Map(
  HTTP_ERROR_CLASSES.map((C) => [C._tag, HttpApiSchema.getStatusError(C)])
)

export const statusOfHttpError = (error: HttpError): number => HTTP_ERROR_STATUS.get(error._tag) ?? 500

export const isHttpError = (error: unknown): error is HttpError =>
  HTTP_ERROR_CLASSES.some((C) => error instanceof C)

/**
 * Keeps the HTTP errors a handler answers with and turns everything else (SQL, event store) into a
 * defect: a logged 500 without internals. Map domain errors to HTTP errors before this.
 */
export const orDieUnlessHttp = <A, E, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, Exclude<E, HttpError>>, R> =>
  Effect.catchIf(
    self,
    (error): error is Exclude<E, HttpError> => !isHttpError(error),
    (error) => Effect.die(error)
  )
