/**
 * The customers context's public face: what other contexts may ask of a customer record
 * (`CustomersPort`, each command in the caller's transaction), its read lookups and its public event
 * schemas. Nothing else of `customers/` is imported from outside it. The port is implemented in
 * `port.ts` and provided at the composition root, so this file imports only customers' own events and types.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type Effect } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import type { CommandError } from "../kernel/CommandRunner.js"
import type { CustomerError } from "./decider.js"

export { customerStream } from "./decider.js"
export * from "./events.js"
export { type AddressRow, type CustomerRow, customerEmailHolders, findCustomer } from "./queries.js"

/** The customer record of a shopper who registers: their login's ids, email and names. */
export interface ShopperRecord {
  readonly customerId: string
  readonly userId: string
  readonly email: string
  readonly firstName: string
  readonly lastName: string
}

/** Commands on customer records for other contexts; each joins the caller's transaction. */
export interface CustomersPortShape {
  /** Creates a registering shopper's record (no phone, tags or metadata yet). */
  readonly createShopper: (
    record: ShopperRecord,
    metadata: EventMetadata
  ) => Effect.Effect<void, CommandError<CustomerError>>
}

export class CustomersPort extends Context.Tag("customers/CustomersPort")<
  CustomersPort,
  CustomersPortShape
>() {}

/**
 * What the customers context asks of billing's test clocks when a customer is created on one
 * (`POST /user {testClockId}`). Provided by `src/billing/testClocks`; without it no customer can be
 * put on a test clock.
 */
export interface CustomerClocksShape {
  /** Test clocks are offered (the test processor); otherwise `testClockId` is refused. */
  readonly offered: boolean
  /**
   * Whether the clock exists (not deleted), holding it to the end of the caller's transaction so a
   * deletion cannot slip in before the customer is committed.
   */
  readonly hold: (testClockId: string) => Effect.Effect<boolean, SqlError>
}

export class CustomerClocks extends Context.Tag("customers/CustomerClocks")<
  CustomerClocks,
  CustomerClocksShape
>() {}
