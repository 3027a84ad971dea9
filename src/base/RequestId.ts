/**
 * The current request's id: the HTTP middleware sets it on the request's fiber as the `requestId`
 * log annotation (so every log line of the request carries it), and handlers and the metadata of
 * the events a request causes read it back from there. Below every floor that reads it.
 */
import { Effect, FiberRef, HashMap, Option } from "effect"

/** The log annotation holding the request id. */
export const REQUEST_ID_ANNOTATION = "requestId"

/** The current request's id, when the fiber serves a request. */
export const CurrentRequestId: Effect.Effect<string | undefined> = Effect.map(
  FiberRef.get(FiberRef.currentLogAnnotations),
  (annotations) => {
    const value = HashMap.get(annotations, REQUEST_ID_ANNOTATION)
    return Option.isSome(value) && typeof value.value === "string" ? value.value : undefined
  }
)
