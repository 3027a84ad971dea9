/**
 * The customers use cases behind `/user`. Each runs its commands in ONE transaction: a registered
 * shopper's login follows their record (email and name changes, deactivation, erasure), so the user
 * stream is written with the customer stream. Shoppers act on their own record only; another
 * customer's id answers 404, exactly like an unknown one.
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { inTransaction, isUniqueViolation, provideSqlClient } from "../db/Sql.js"
import { EventStore } from "../eventstore/EventStore.js"
import type { AuthenticatedActor } from "../http/Auth.js"
import { BadRequest, Conflict, Forbidden, NotFound, orDieUnlessHttp } from "../http/errors.js"
import { parseSort } from "../http/Lists.js"
import { IdentityPort } from "../identity/index.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import type { MetadataPatch } from "../kernel/Metadata.js"
import * as Time from "../kernel/Time.js"
import { commandMetadata, makeTransact } from "../kernel/UseCase.js"
import {
  type CustomerChanges,
  type CustomerCommand,
  CustomerDecider,
  type CustomerLimitExceeded,
  customerStream,
  type NewAddress
} from "./decider.js"
import { CustomerClocks } from "./index.js"
import {
  type CustomerListQuery,
  type CustomerSort,
  listCustomers,
  lockEmailClaim,
  refuseTakenEmail,
  SORT_FIELDS,
  selectCustomer,
  selectEmailHolders
} from "./queries.js"

export interface NewCustomerInput {
  readonly email: string
  readonly firstName: string
  readonly lastName: string
  readonly phone?: string | null | undefined
  readonly tags?: ReadonlyArray<string> | undefined
  readonly metadata?: Readonly<Record<string, unknown>> | undefined
  readonly testClockId?: string | undefined
}

/** The `Create` command for a new customer's input (optional fields at their defaults). */
export const createCustomerCommand = (
  customerId: string,
  input: NewCustomerInput
): Extract<CustomerCommand, { readonly _tag: "Create" }> => ({
  _tag: "Create",
  customerId,
  email: input.email,
  firstName: input.firstName,
  lastName: input.lastName,
  phone: input.phone ?? null,
  tags: input.tags ?? [],
  metadata: input.metadata ?? {},
  ...(input.testClockId === undefined ? {} : { testClockId: input.testClockId })
})

export interface CustomerPatchInput {
  readonly email?: string | undefined
  readonly firstName?: string | undefined
  readonly lastName?: string | undefined
  readonly phone?: string | null | undefined
  readonly metadata?: MetadataPatch | undefined
  readonly tags?: ReadonlyArray<string> | undefined
  readonly active?: boolean | undefined
}

export interface AddressInput {
  readonly label?: string | null | undefined
  readonly line1: string
  readonly city: string
  readonly state?: string | null | undefined
  readonly postalCode?: string | null | undefined
  readonly country: string
  readonly isDefault?: boolean | undefined
}

export interface ListInput {
  readonly page: number
  readonly display: number
  readonly sort?: string | undefined
  readonly q?: string | undefined
  readonly tag?: string | undefined
  readonly since?: Date | undefined
}

/** Fields only staff may change: a shopper's own record keeps them as the store set them. */
const STAFF_FIELDS = ["metadata", "tags", "active"] as const

const notFound = NotFound.of({ message: "No such customer", param: "id" })
const addressNotFound = NotFound.of({ message: "No such address", param: "address_id" })
const emailTaken = Conflict.of({
  code: "resource_already_exists",
  message: "a customer or account with this email already exists",
  param: "email"
})

/** Too many tags or metadata keys: the request is at fault. */
const invalidField = (e: CustomerLimitExceeded) =>
  BadRequest.of({ code: "parameter_invalid", message: e.message, param: e.field })

/** The address book is full: the record's state is at fault. */
const addressLimit = (e: CustomerLimitExceeded) =>
  Conflict.of({ code: "address_limit_reached", message: e.message })

/** The list's sort (already checked by the route schema); newest first by default. */
export const customerSort = (sort: string | undefined): CustomerSort =>
  parseSort(SORT_FIELDS, sort, { field: "createdAt", direction: "desc" })

const blankToUndefined = (text: string | undefined) => {
  const trimmed = text?.trim()
  return trimmed === undefined || trimmed === "" ? undefined : trimmed
}

export const makeCustomers = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const store = yield* EventStore
  const identity = yield* IdentityPort
  const transact = yield* makeTransact
  const sql = yield* SqlClient.SqlClient
  const clocks = yield* Effect.serviceOption(CustomerClocks)
  const withSql = provideSqlClient(sql)

  /** A new customer's test clock must exist (and is held until the creation commits). */
  const ensureClock = (testClockId: string | undefined) =>
    Effect.gen(function* () {
      if (testClockId === undefined) return
      const offered = Option.isSome(clocks) && clocks.value.offered
      if (offered && (yield* clocks.value.hold(testClockId))) return
      return yield* Effect.fail(
        BadRequest.of(
          offered
            ? {
                code: "resource_missing",
                message: `No such test clock: ${testClockId}`,
                param: "testClockId"
              }
            : {
                code: "parameter_invalid",
                message: "test clocks exist only with PAYMENT_PROCESSOR=test",
                param: "testClockId"
              }
        )
      )
    })

  /** The customer id a request acts on: `me` and a shopper's own id resolve; anything else is 404. */
  const resolve = (actor: AuthenticatedActor, id: string) => {
    const own = actor.role === "customer" ? actor.customerId : undefined
    if (id === "me") {
      return actor.customerId !== undefined
        ? Effect.succeed(actor.customerId)
        : Effect.fail(
            NotFound.of({ message: "this credential has no customer record: use a customer id", param: "id" })
          )
    }
    if (actor.role === "customer" && id !== own) return Effect.fail(notFound)
    return Ids.isValid("cus", id) ? Effect.succeed(id) : Effect.fail(notFound)
  }

  const view = (customerId: string) =>
    Effect.flatMap(selectCustomer(sql, customerId), (row) =>
      Option.match(row, {
        onNone: () => Effect.fail(notFound),
        onSome: Effect.succeed
      })
    )

  /**
   * Refuses an address another customer or account holds. A registered shopper's login carries
   * their customer id, so `customerId` excludes both the record itself and its own login.
   */
  /**
   * Refuses an email another record or login holds. `queued`: claims of one email queue first
   * (`lockEmailClaim`), for a transaction the caller owns — an Idempotency-Key request, which stores
   * its answer in that transaction: a racing duplicate must be a clean 409 there, not a unique
   * violation that aborts it (a 500). A transaction of the use case's own needs no queue: the unique
   * index's refusal rolls back only that transaction and is answered 409 (one statement fewer on
   * `POST /user`).
   */
  const ensureEmailFree = (email: string, customerId: string | undefined, queued: boolean) =>
    Effect.flatMap(
      queued
        ? Effect.zipRight(lockEmailClaim(sql, email), selectEmailHolders(sql, email))
        : selectEmailHolders(sql, email),
      (holders) =>
        holders.some((h) => h.customerId === null || h.customerId !== customerId)
          ? Effect.fail(emailTaken)
          : Effect.void
    )

  const execute = (customerId: string, command: CustomerCommand, actor: AuthenticatedActor) =>
    Effect.flatMap(commandMetadata(actor), (metadata) =>
      runner.execute(CustomerDecider, customerStream(customerId), command, {
        metadata,
        // A creation's id was minted just before: there is no stream to read.
        newStream: command._tag === "Create"
      })
    )

  const list = (actor: AuthenticatedActor, input: ListInput) => {
    const query: CustomerListQuery = {
      page: input.page,
      display: input.display,
      sort: customerSort(input.sort),
      q: blankToUndefined(input.q),
      tag: blankToUndefined(input.tag),
      since: input.since,
      // A shopper lists only their own record.
      ...(actor.role === "customer" ? { customerId: actor.customerId ?? "" } : {})
    }
    return withSql(listCustomers(query)).pipe(Effect.orDie)
  }

  const get = (actor: AuthenticatedActor, id: string) =>
    Effect.flatMap(resolve(actor, id), view).pipe(orDieUnlessHttp)

  const create = (actor: AuthenticatedActor, input: NewCustomerInput) =>
    Effect.gen(function* () {
      const customerId = yield* Ids.make("cus")
      // The email check is the transaction's first statement, on its connection. In a transaction
      // of the use case's own it reads nothing back: it travels with the append, and its refusal
      // (23505, as the index's) fails the append and is answered 409 below. A caller's transaction
      // (an Idempotency-Key request) must not be aborted by it: there the holders are read.
      const callerTransaction = yield* inTransaction
      const result = yield* transact(
        Effect.zipRight(
          Effect.zipRight(
            callerTransaction
              ? ensureEmailFree(input.email, undefined, true)
              : refuseTakenEmail(sql, input.email),
            ensureClock(input.testClockId)
          ),
          execute(customerId, createCustomerCommand(customerId, input), actor)
        )
      ).pipe(
        Effect.catchTag("CustomerLimitExceeded", (e) => Effect.fail(invalidField(e))),
        // Two creations of one address raced: the read model's unique index refused the second.
        Effect.catchIf(isUniqueViolation, () => Effect.fail(emailTaken))
      )
      return {
        id: customerId,
        email: input.email,
        firstName: input.firstName,
        lastName: input.lastName,
        createdAt: result.events[0]?.recordedAt ?? (yield* Time.now)
      }
    }).pipe(orDieUnlessHttp)

  const update = (actor: AuthenticatedActor, id: string, patch: CustomerPatchInput) =>
    Effect.gen(function* () {
      const customerId = yield* resolve(actor, id)
      if (actor.role === "customer") {
        const refused = STAFF_FIELDS.find((field) => patch[field] !== undefined)
        if (refused !== undefined) {
          return yield* Effect.fail(
            Forbidden.of({
              code: "insufficient_scope",
              message: `a shopper cannot change ${refused}: only email, firstName, lastName and phone`,
              param: refused
            })
          )
        }
      }
      const changes: CustomerChanges = {
        ...(patch.email === undefined ? {} : { email: patch.email }),
        ...(patch.firstName === undefined ? {} : { firstName: patch.firstName }),
        ...(patch.lastName === undefined ? {} : { lastName: patch.lastName }),
        ...(patch.phone === undefined ? {} : { phone: patch.phone }),
        ...(patch.metadata === undefined ? {} : { metadata: patch.metadata }),
        ...(patch.tags === undefined ? {} : { tags: patch.tags }),
        ...(patch.active === undefined ? {} : { active: patch.active })
      }
      const now = yield* Time.now
      const metadata = yield* commandMetadata(actor)
      const callerTransaction = yield* inTransaction
      yield* transact(
        Effect.gen(function* () {
          if (patch.email !== undefined) yield* ensureEmailFree(patch.email, customerId, callerTransaction)
          const result = yield* execute(customerId, { _tag: "Update", changes }, actor)
          const state = result.state
          const userId = state.userId
          if (userId === undefined || result.events.length === 0) return
          // The login follows the record: same email and name (the decider drops what is unchanged).
          if (result.events.some((e) => e.type === "customer.updated")) {
            const profile = {
              ...(state.email === null ? {} : { email: state.email }),
              ...(state.firstName === null ? {} : { firstName: state.firstName }),
              ...(state.lastName === null ? {} : { lastName: state.lastName })
            }
            yield* identity.followProfile(userId, profile, metadata)
          }
          if (result.events.some((e) => e.type === "customer.deactivated"))
            yield* identity.deactivate(userId, now, metadata)
          if (result.events.some((e) => e.type === "customer.reactivated"))
            yield* identity.reactivate(userId, metadata)
        })
      ).pipe(
        Effect.catchTags({
          CustomerNotFound: () => Effect.fail(notFound),
          CustomerLimitExceeded: (e) => Effect.fail(invalidField(e))
        }),
        Effect.catchIf(isUniqueViolation, () => Effect.fail(emailTaken))
      )
      return yield* view(customerId)
    }).pipe(orDieUnlessHttp)

  const addAddress = (actor: AuthenticatedActor, id: string, input: AddressInput) =>
    Effect.gen(function* () {
      const customerId = yield* resolve(actor, id)
      const addressId = yield* Ids.make("adr")
      const address: NewAddress = {
        label: input.label ?? null,
        line1: input.line1,
        city: input.city,
        state: input.state ?? null,
        postalCode: input.postalCode ?? null,
        country: input.country
      }
      const result = yield* transact(
        execute(
          customerId,
          { _tag: "AddAddress", addressId, address, makeDefault: input.isDefault === true },
          actor
        )
      ).pipe(
        Effect.catchTags({
          CustomerNotFound: () => Effect.fail(notFound),
          CustomerLimitExceeded: (e) => Effect.fail(addressLimit(e))
        })
      )
      const added = result.state.addresses.find((a) => a.addressId === addressId)
      return {
        id: addressId,
        ...address,
        isDefault: added?.isDefault ?? false
      }
    }).pipe(orDieUnlessHttp)

  const removeAddress = (actor: AuthenticatedActor, id: string, addressId: string) =>
    Effect.gen(function* () {
      const customerId = yield* resolve(actor, id)
      if (!Ids.isValid("adr", addressId)) return yield* Effect.fail(addressNotFound)
      yield* transact(execute(customerId, { _tag: "RemoveAddress", addressId }, actor)).pipe(
        Effect.catchTags({
          CustomerNotFound: () => Effect.fail(notFound),
          AddressNotFound: () => Effect.fail(addressNotFound)
        })
      )
    }).pipe(orDieUnlessHttp)

  const tag = (actor: AuthenticatedActor, id: string, tags: ReadonlyArray<string>) =>
    Effect.gen(function* () {
      const customerId = yield* resolve(actor, id)
      yield* transact(execute(customerId, { _tag: "Tag", tags }, actor)).pipe(
        Effect.catchTags({
          CustomerNotFound: () => Effect.fail(notFound),
          CustomerLimitExceeded: (e) => Effect.fail(invalidField(e))
        })
      )
      return yield* view(customerId)
    }).pipe(orDieUnlessHttp)

  /**
   * Erasure: `customer.erased` (and `user.erased` for a registered shopper) are appended, the read
   * rows go with them, and then both data keys are destroyed — all in one transaction. The events
   * stay; their personal fields can no longer be decrypted.
   */
  const erase = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      const customerId = yield* resolve(actor, id)
      const now = yield* Time.now
      const metadata = yield* commandMetadata(actor)
      yield* transact(
        Effect.gen(function* () {
          const result = yield* execute(customerId, { _tag: "Erase" }, actor)
          const userId = result.state.userId
          if (userId !== undefined) yield* identity.erase(userId, now, metadata)
          // Keys last: a failure before this point rolls back with nothing forgotten.
          yield* store.forgetSubject(customerId)
          if (userId !== undefined) yield* identity.forgetKey(userId)
        })
      ).pipe(Effect.catchTag("CustomerNotFound", () => Effect.fail(notFound)))
    }).pipe(orDieUnlessHttp)

  return { list, get, create, update, addAddress, removeAddress, tag, erase }
})

export type CustomersShape = Effect.Effect.Success<typeof makeCustomers>

export class Customers extends Context.Tag("customers/Customers")<Customers, CustomersShape>() {}

export const CustomersLive = Layer.effect(Customers, makeCustomers)
