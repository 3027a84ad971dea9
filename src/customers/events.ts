/**
 * Customer events. Personal fields (contact details, names, addresses, metadata) are encrypted under
 * the customer's own key (subject = customer id): erasing the customer forgets the key and they read
 * back as `Shredded`, while ids, flags and tags stay readable for the audit trail.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf, Personal } from "../eventstore/EventType.js"
import { Metadata } from "../kernel/Metadata.js"

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
    userId: Schema.optional(Schema.String),
    /** The billing test clock the customer lives on (`POST /user {testClockId}`); absent for most. */
    testClockId: Schema.optional(Schema.String)
  }),
  subject: (d) => d.customerId
})

/** Only the fields that changed; `metadata` and `tags` carry their whole new value. */
export const CustomerUpdated = defineEvent("customer.updated", {
  schema: Schema.Struct({
    customerId: Schema.String,
    email: Schema.optional(Personal(Schema.String)),
    firstName: Schema.optional(Personal(Schema.String)),
    lastName: Schema.optional(Personal(Schema.String)),
    phone: Schema.optional(Personal(Schema.NullOr(Schema.String))),
    metadata: Schema.optional(Personal(Metadata)),
    tags: Schema.optional(Schema.Array(Schema.String))
  }),
  subject: (d) => d.customerId
})

export const CustomerAddressAdded = defineEvent("customer.address_added", {
  schema: Schema.Struct({
    customerId: Schema.String,
    addressId: Schema.String,
    label: Personal(Schema.NullOr(Schema.String)),
    line1: Personal(Schema.String),
    city: Personal(Schema.String),
    state: Personal(Schema.NullOr(Schema.String)),
    postalCode: Personal(Schema.NullOr(Schema.String)),
    country: Personal(Schema.String),
    /** This address became the default (the first one always does). */
    isDefault: Schema.Boolean
  }),
  subject: (d) => d.customerId
})

export const CustomerAddressRemoved = defineEvent("customer.address_removed", {
  schema: Schema.Struct({
    customerId: Schema.String,
    addressId: Schema.String,
    /** The default address after the removal (another one is promoted when the default goes). */
    defaultAddressId: Schema.NullOr(Schema.String)
  })
})

/** Tags added by `POST /user/:id/tag` (only those the customer did not have). */
export const CustomerTagged = defineEvent("customer.tagged", {
  schema: Schema.Struct({ customerId: Schema.String, tags: Schema.Array(Schema.String) })
})

export const CustomerDeactivated = defineEvent("customer.deactivated", {
  schema: Schema.Struct({ customerId: Schema.String })
})

export const CustomerReactivated = defineEvent("customer.reactivated", {
  schema: Schema.Struct({ customerId: Schema.String })
})

/**
 * Permanent erasure: written just before the customer's key is destroyed. It carries no personal
 * data, so the log keeps a readable record that (and when) the customer was erased.
 */
export const CustomerErased = defineEvent("customer.erased", {
  schema: Schema.Struct({ customerId: Schema.String, userId: Schema.optional(Schema.String) })
})

export const customerEventTypes = [
  CustomerCreated,
  CustomerUpdated,
  CustomerAddressAdded,
  CustomerAddressRemoved,
  CustomerTagged,
  CustomerDeactivated,
  CustomerReactivated,
  CustomerErased
] as const

export type CustomerEvent = EventOf<(typeof customerEventTypes)[number]>
