/**
 * The current request's id: set by the HTTP middleware for the request's fiber, read by handlers,
 * logs and the metadata of the events a request causes. Below every floor that reads it.
 */
import { FiberRef } from "effect"

export const CurrentRequestId = FiberRef.unsafeMake<string | undefined>(undefined)
