/**
 * Orders placed the way checkout completion places them, until the checkout flow exists: through
 * the orders port, in the app's own runtime (the test's layer), optionally holding the stock first
 * (a reservation for a checkout id, converted to the order in the placing transaction), as the
 * checkout does.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { expect } from "vitest"
import { CatalogPort } from "../../src/catalog/index.js"
import { makeAppConfig } from "../../src/config.js"
import type { EventMetadata } from "../../src/eventstore/EventStore.js"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import * as Ids from "../../src/kernel/Ids.js"
import { OrdersPort, type PlaceOrderInput } from "../../src/orders/index.js"
import { refundRecovery } from "../../src/orders/refunds.js"
import { processorCallRecovery } from "../../src/payments/recovery.js"
import { type Processor, processorsLayer } from "../../src/processors/Supervisor.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import type { ProcessorServices } from "../../src/services.js"
import { servicesLayer } from "../../src/services.js"
import type { Json } from "./checkout.js"
import { testConfig } from "./database.js"
import { call, uniqueEmail } from "./identity.js"
import { eventually, notificationsHttp } from "./notifications.js"

export const TEST_METADATA: EventMetadata = { actor: { type: "system", id: "test" } }

export interface TestLine {
  readonly productId: string
  readonly quantity: number
  readonly unitAmount?: number
  readonly name?: string
}

export interface TestOrder extends Partial<Omit<PlaceOrderInput, "lineItems">> {
  readonly lines?: ReadonlyArray<TestLine>
  /** Reserve the lines' stock for a checkout first and convert it to the order (as checkout does). */
  readonly holdStock?: boolean
}

/** The input a placement of `order` takes (a fresh `ord_` id, a fake product unless lines are given). */
export const placeInput = (order: TestOrder = {}) =>
  Effect.gen(function* () {
    const orderId = order.orderId ?? (yield* Ids.make("ord"))
    const lines = order.lines ?? [{ productId: yield* Ids.make("prod"), quantity: 2, unitAmount: 1500 }]
    const lineItems = lines.map((l, i) => {
      const unitAmount = l.unitAmount ?? 1000
      return {
        productId: l.productId,
        name: l.name ?? `Product ${i + 1}`,
        sku: null,
        quantity: l.quantity,
        unitAmount,
        amountTotal: unitAmount * l.quantity
      }
    })
    const subtotal = lineItems.reduce((n, l) => n + l.amountTotal, 0)
    const payment = order.payment ?? "captured"
    const input: PlaceOrderInput = {
      orderId,
      checkoutId: order.checkoutId ?? null,
      customerId: order.customerId ?? null,
      email: order.email ?? uniqueEmail("buyer"),
      currency: order.currency ?? "USD",
      lineItems,
      subtotal,
      total: order.total ?? subtotal,
      shippingAddress: order.shippingAddress ?? {
        label: null,
        line1: "1 Main St",
        city: "Lyon",
        state: null,
        postalCode: "69001",
        country: "FR"
      },
      paymentIntentId: order.paymentIntentId ?? null,
      paymentId: order.paymentId ?? null,
      payment,
      amountCaptured: order.amountCaptured ?? (payment === "captured" ? (order.total ?? subtotal) : 0),
      metadata: order.metadata ?? {}
    }
    return input
  })

/** Places an order through the port (in a transaction of its own, as checkout completion would). */
export const placeOrder = (order: TestOrder = {}) =>
  Effect.gen(function* () {
    const port = yield* OrdersPort
    const runner = yield* CommandRunner
    const catalog = yield* CatalogPort
    const input = yield* placeInput(order)
    return yield* runner.transact(
      Effect.gen(function* () {
        if (order.holdStock === true) {
          const checkoutId = input.checkoutId ?? (yield* Ids.make("chk"))
          yield* catalog.reserve(
            checkoutId,
            input.lineItems.map((l) => ({ productId: l.productId, quantity: l.quantity })),
            TEST_METADATA
          )
          const placed = yield* port.place(input, TEST_METADATA)
          yield* catalog.convertToOrder(checkoutId, input.orderId, TEST_METADATA)
          return placed
        }
        return yield* port.place(input, TEST_METADATA)
      })
    )
  }).pipe(Effect.orDie)

/**
 * An order paid through the payments routes (the test processor): a payment of the lines' total
 * (captured, or only authorized with `captureMethod: "manual"`), then the order placed with it.
 */
export const paidOrder = (
  token: string,
  order: TestOrder & {
    readonly captureMethod?: "automatic" | "manual"
    /** The test processor's card (`pm_card_refundFail`: paid, but every refund is refused). */
    readonly paymentMethod?: string
  } = {}
) =>
  Effect.gen(function* () {
    const input = yield* placeInput(order)
    const manual = order.captureMethod === "manual"
    const r = yield* call("POST", "/v1/payments", {
      token,
      json: {
        amount: input.total,
        currency: input.currency,
        paymentMethod: order.paymentMethod ?? "pm_card_visa",
        captureMethod: manual ? "manual" : "automatic",
        ...(input.customerId === null ? {} : { customerId: input.customerId })
      }
    })
    if (r.status !== 201) throw new Error(`payment answered ${r.status}: ${r.text}`)
    return yield* placeOrder({
      ...order,
      orderId: input.orderId,
      lines:
        order.lines ??
        input.lineItems.map((l) => ({
          productId: l.productId,
          quantity: l.quantity,
          unitAmount: l.unitAmount
        })),
      paymentId: r.body.id,
      paymentIntentId: r.body.paymentIntentId,
      payment: manual ? "authorized" : "captured",
      amountCaptured: manual ? 0 : input.total
    })
  })

/** The public events of an order, oldest first. */
export const publicEventsOf = (orderId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    // biome-ignore lint/suspicious/noExplicitAny: snapshots are inspected field by field
    (sql) => sql<{ type: string; data: any }>`SELECT type, data FROM event_store.public_events
      WHERE stream_id = ${`order-${orderId}`} ORDER BY position`
  )

/**
 * The app with the two safety nets running (payments' processor-call recovery, orders' refund
 * recovery), due 1 s after a call: what completes a refund whose outcome lost the race to be
 * recorded (under 50 concurrent refunds of one payment, some do).
 */
const RECOVERY = [processorCallRecovery(), refundRecovery()]
export const RecoveryHttp = Layer.mergeAll(HttpAppLive, processorsLayer(RECOVERY)).pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(
    servicesLayer({ processors: RECOVERY, projections }).pipe(
      Layer.provideMerge(testConfig({ payments: { ...makeAppConfig().payments, recoveryAfterSeconds: 1 } }))
    )
  )
)

/** `GET /v1/orders/:id` as `token`, asserting 200. */
export const getOrder = (token: string, id: string) =>
  Effect.map(call("GET", `/v1/orders/${id}`, { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body as Json
  })

/** The order once `done` holds for it (polled: flows and workers change it in the background). */
export const orderWhen = (token: string, id: string, done: (o: Json) => boolean, timeoutMs = 20_000) =>
  eventually(
    Effect.map(getOrder(token, id), (o) => (done(o) ? o : undefined)),
    timeoutMs
  )

/**
 * The app with peers and `processors` running, the payments and refund safety nets due 1 s after a
 * call (the refund flows' tests).
 */
export const fastRecoveryHttp = (processors: ReadonlyArray<Processor<ProcessorServices>>) =>
  notificationsHttp({
    processors,
    overrides: { payments: { ...makeAppConfig().payments, recoveryAfterSeconds: 1 } }
  })
