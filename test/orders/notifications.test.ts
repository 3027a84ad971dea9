/**
 * Order notifications end to end (spec §6.5, issue #20 item 3): real orders' changes → their public
 * events → the automatic trigger mapping → the built-in templates, filled from the order (number,
 * totals, tracking link, refunded amount) → mail at the real SMTP sink. `order.confirmed` only once
 * paid (never for a pending order), `order.shipped` only for a fulfilment with tracking.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { adminToken } from "../support/customers.js"
import { call, uniqueEmail } from "../support/identity.js"
import { notificationsHttp, Peers } from "../support/notifications.js"
import { paidOrder, placeOrder } from "../support/orders.js"
import type { ReceivedMail } from "../support/smtp.js"

const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const

/** The mails to `to` once there are `count` of them (polled). */
const mailsTo = (to: string, count: number, timeoutMs = 15_000) =>
  Effect.gen(function* () {
    const { smtp } = yield* Peers
    const deadline = Date.now() + timeoutMs
    while (true) {
      const mails = smtp.messages.filter((m) => m.to.includes(to))
      if (mails.length >= count) return mails
      if (Date.now() > deadline)
        return yield* Effect.dieMessage(
          `${count} mails to ${to} expected, ${mails.length} arrived: ${mails.map((m) => m.subject).join(" | ")}`
        )
      yield* Effect.sleep("50 millis")
    }
  })

const subjects = (mails: ReadonlyArray<ReceivedMail>) => mails.map((m) => m.subject)

layer(notificationsHttp(), OPTIONS)("order notifications through the SMTP sink", (it) => {
  it.effect("confirmed, shipped (with the tracking link), delivered, refunded", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const email = uniqueEmail("notified")
      const order = yield* paidOrder(token, { email })
      const n = order.displayId
      const [confirmed] = yield* mailsTo(email, 1)
      expect(confirmed?.subject).toBe(`Your order #${n} is confirmed`)
      expect(confirmed?.text).toContain(`Order: #${n}`)
      expect(confirmed?.text).toContain("$30.00")
      const fulfilled = yield* call("POST", `/v1/orders/${order.id}/fulfill`, {
        token,
        json: {
          trackingNumber: "1Z999AA1",
          trackingUrl: "https://track.example.com/1Z999AA1",
          carrier: "UPS"
        }
      })
      expect(fulfilled.status, fulfilled.text).toBe(200)
      const shipped = (yield* mailsTo(email, 2))[1]
      expect(shipped?.subject).toBe(`Your order #${n} has shipped`)
      expect(shipped?.text).toContain("Carrier: UPS")
      expect(shipped?.text).toContain("Tracking number: 1Z999AA1")
      expect(shipped?.text).toContain("https://track.example.com/1Z999AA1")
      const fid = fulfilled.body.fulfillments[0].id
      const delivered = yield* call("PATCH", `/v1/orders/${order.id}/fulfillments/${fid}`, {
        token,
        json: { status: "delivered" }
      })
      expect(delivered.status, delivered.text).toBe(200)
      expect((yield* mailsTo(email, 3))[2]?.subject).toBe(`Your order #${n} has been delivered`)
      const refunded = yield* call("POST", `/v1/orders/${order.id}/refund`, { token, json: { amount: 1250 } })
      expect(refunded.status, refunded.text).toBe(200)
      const refundMail = (yield* mailsTo(email, 4))[3]
      expect(refundMail?.subject).toBe(`Your refund for order #${n}`)
      expect(refundMail?.text).toContain("$12.50")
    })
  )

  it.effect("a pending order sends nothing until it is paid; a cancellation sends order.cancelled", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const email = uniqueEmail("pending")
      const order = yield* paidOrder(token, { email, captureMethod: "manual" })
      const cancelled = yield* call("POST", `/v1/orders/${order.id}/cancel`, { token, json: {} })
      expect(cancelled.status, cancelled.text).toBe(200)
      const mails = yield* mailsTo(email, 1)
      expect(subjects(mails)).toEqual([`Your order #${order.displayId} has been cancelled`])
    })
  )

  it.effect("a fulfilment without tracking ships no notification", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const email = uniqueEmail("untracked")
      const order = yield* placeOrder({ email })
      yield* mailsTo(email, 1)
      const r = yield* call("POST", `/v1/orders/${order.id}/fulfill`, { token, json: {} })
      expect(r.status, r.text).toBe(200)
      // A later change's mail arrives after the (absent) shipping one would have.
      const cancelledOther = yield* placeOrder({ email, payment: "not_required" })
      yield* call("POST", `/v1/orders/${cancelledOther.id}/cancel`, { token, json: {} })
      const mails = yield* mailsTo(email, 3)
      expect([...subjects(mails)].sort()).toEqual(
        [
          `Your order #${order.displayId} is confirmed`,
          `Your order #${cancelledOther.displayId} is confirmed`,
          `Your order #${cancelledOther.displayId} has been cancelled`
        ].sort()
      )
    })
  )
})
