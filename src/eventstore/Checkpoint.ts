/**
 * A position in the global feed: the pair (transaction id, global position). Position alone is not
 * a safe checkpoint — a smaller position can commit after a larger one (research/eventstore.md §3).
 * The string form "<xid>:<position>", each zero-padded to 20 digits, sorts like the pair.
 */
import { Data, Effect, Schema } from "effect"

export interface Checkpoint {
  readonly xid: string
  readonly position: number
}

export const origin: Checkpoint = { xid: "0", position: 0 }

const pad = (s: string) => s.padStart(20, "0")

export const format = (c: Checkpoint): string => `${pad(c.xid)}:${pad(String(c.position))}`

export class InvalidCheckpoint extends Data.TaggedError("InvalidCheckpoint")<{ readonly input: string }> {
  override get message() {
    return `"${this.input}" is not a checkpoint (expected "<xid>:<position>")`
  }
}

/** The checkpoint `input` ("<xid>:<position>") writes, if it is one. */
const fromString = (input: string): Checkpoint | undefined => {
  const match = /^(\d{1,20}):(\d{1,20})$/.exec(input.trim())
  const position = match?.[2] ? Number(match[2]) : Number.NaN
  if (!match?.[1] || !Number.isSafeInteger(position)) return undefined
  return { xid: BigInt(match[1]).toString(), position }
}

export const parse = (input: string): Effect.Effect<Checkpoint, InvalidCheckpoint> => {
  const checkpoint = fromString(input)
  return checkpoint === undefined ? Effect.fail(new InvalidCheckpoint({ input })) : Effect.succeed(checkpoint)
}

export const compare = (a: Checkpoint, b: Checkpoint): number => {
  const ax = BigInt(a.xid)
  const bx = BigInt(b.xid)
  if (ax !== bx) return ax < bx ? -1 : 1
  return a.position === b.position ? 0 : a.position < b.position ? -1 : 1
}

/**
 * `checkpoint`, or `scannedTo` ("<xid>:<position>", as a horizon query answers; null: none) when
 * that lies after it.
 */
export const laterOf = (checkpoint: Checkpoint, scannedTo: string | null): Checkpoint => {
  const candidate = scannedTo === null ? undefined : fromString(scannedTo)
  return candidate !== undefined && compare(candidate, checkpoint) > 0 ? candidate : checkpoint
}

export const CheckpointString = Schema.String.pipe(Schema.pattern(/^\d{1,20}:\d{1,20}$/))
