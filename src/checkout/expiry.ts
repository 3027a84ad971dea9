/**
 * The expiry worker (`ROLE=worker|all`), the shape of webhooks/delivery.ts: a `checkout.expire`
 * item comes due at the checkout's `expiresAt` (or at once, re-armed when a payment of an expired
 * checkout turns up); `Checkouts.handleExpiry` expires it and releases its stock in one transaction,
 * then cancels its intent or gives a late payment back, outside any transaction. Clock-driven.
 */
import { Effect } from "effect"
import { type DueItem, DueOutcome, dueWorker } from "../processors/DueWork.js"
import { Checkouts, EXPIRE_KIND } from "./Checkouts.js"

const checkoutIdOf = (item: DueItem): string | undefined => {
  const payload = item.payload
  return typeof payload === "object" && payload !== null && "checkoutId" in payload
    ? String(payload.checkoutId)
    : undefined
}

export const handleExpiryItem = (item: DueItem) =>
  Effect.gen(function* () {
    const checkoutId = checkoutIdOf(item) ?? item.key
    if (checkoutId === "") return DueOutcome.failed({ error: "no checkoutId in the payload" })
    const checkouts = yield* Checkouts
    return yield* checkouts.handleExpiry(checkoutId)
  })

export const checkoutExpiry = () =>
  dueWorker({
    name: "checkout-expiry",
    kinds: [EXPIRE_KIND],
    concurrency: 8,
    maxAttempts: 50,
    handle: handleExpiryItem
  })
