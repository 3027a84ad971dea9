/**
 * Customer events. Personal fields are encrypted under the customer's own key (subject = customer
 * id): erasing the customer forgets the key and they read back as `Shredded`.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf, Personal } from "../eventstore/EventType.js"

export const Metadata = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const CustomerCreated = defineEvent("customer.created", {
  schema: Schema.Struct({
    customerId: Schema.String,
    email: Personal(Schema.String),
    firstName: Personal(Schema.String),
    lastName: Personal(Schema.String),
    phone: Personal(Schema.NullOr(Schema.String)),
    tags: Schema.Array(Schema.String),
    metadata: Personal(Metadata),
    /** The login of a registered shopper; absent for customers created by staff. */
    userId: Schema.optional(Schema.String)
  }),
  subject: (d) => d.customerId
})

export const customerEventTypes = [CustomerCreated] as const

export type CustomerEvent = EventOf<typeof CustomerCreated>
