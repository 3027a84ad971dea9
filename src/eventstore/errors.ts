/**
 * Typed failures of the event store. Bad input (wrong expected version, unknown stream, malformed
 * payload) always surfaces as one of these, never as a crash or a partial write.
 */
import { Data } from "effect"

export class WrongExpectedVersion extends Data.TaggedError("WrongExpectedVersion")<{
  readonly streamId: string
  readonly expected: number | "any" | "no_stream"
  readonly actual: number
}> {
  override get message() {
    return `stream ${this.streamId}: expected version ${this.expected}, actual ${this.actual}`
  }
}

/**
 * A transaction with a newer xid already appended to the stream: appending now would put this
 * stream's versions out of order in the global feed. Retry the whole unit of work in a new transaction.
 */
export class StreamOrderingConflict extends Data.TaggedError("StreamOrderingConflict")<{
  readonly streamId: string
}> {}

export class StreamNotFound extends Data.TaggedError("StreamNotFound")<{ readonly streamId: string }> {
  override get message() {
    return `stream ${this.streamId} does not exist`
  }
}

/** An event id that is already in the store: process managers rely on this to stay idempotent. */
export class DuplicateEvent extends Data.TaggedError("DuplicateEvent")<{
  readonly streamId: string
  readonly detail: string
}> {}

export class InvalidEventPayload extends Data.TaggedError("InvalidEventPayload")<{
  readonly eventType: string
  readonly message: string
}> {}

export class UnknownEventType extends Data.TaggedError("UnknownEventType")<{
  readonly eventType: string
  readonly message: string
}> {}

/** A stored event that no longer decodes with its schema (a missing upcaster, a corrupted row). */
export class EventDecodeError extends Data.TaggedError("EventDecodeError")<{
  readonly eventId: string
  readonly eventType: string
  readonly schemaVersion: number
  readonly message: string
}> {}

/** Personal data for a subject whose key was shredded: nothing new may be written for it. */
export class SubjectForgotten extends Data.TaggedError("SubjectForgotten")<{ readonly subjectId: string }> {
  override get message() {
    return `subject ${this.subjectId} was forgotten; no personal data can be stored for it`
  }
}

export class InvalidStreamId extends Data.TaggedError("InvalidStreamId")<{
  readonly streamId: string
  readonly message: string
}> {}

/** An append that is malformed as a whole: no events, or an expected version that is not one. */
export class InvalidAppend extends Data.TaggedError("InvalidAppend")<{
  readonly streamId: string
  readonly message: string
}> {}

export type AppendError =
  | InvalidAppend
  | WrongExpectedVersion
  | StreamOrderingConflict
  | DuplicateEvent
  | InvalidEventPayload
  | SubjectForgotten
  | InvalidStreamId
