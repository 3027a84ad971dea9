/**
 * The purchase load of `npm run bench:checkout`, in a worker thread (as autocannon runs the other
 * benches' load): the load generator does not share the server's event loop. `workerData`:
 * `{ base, key, productIds, seconds, connections, guestPrefix }`. Each of `connections` loops buys
 * until `seconds` have passed: `POST /v1/checkouts` (a fresh guest email, one line of a random
 * product, 1–3 units), then `POST /v1/checkouts/:id/confirm {paymentMethod: "pm_card_visa"}`, over
 * keep-alive connections (node:http, lighter than fetch). A purchase counts when the confirm answers
 * 200 `complete` with an `orderId`. Posts back `{ latencies, orderIds, failures, elapsedMs }`.
 */
import { Agent, request } from "node:http"
import { performance } from "node:perf_hooks"
import { parentPort, workerData } from "node:worker_threads"

const { base, key, productIds, seconds, connections, guestPrefix } = workerData
const agent = new Agent({ keepAlive: true, maxSockets: connections })
const target = new URL(base)

/** One JSON request: its status and parsed body (undefined when it is not JSON). */
const post = (path, body) =>
  new Promise((resolve, reject) => {
    const payload = JSON.stringify(body)
    const req = request(
      {
        agent,
        host: target.hostname,
        port: target.port,
        method: "POST",
        path,
        headers: {
          authorization: `Bearer ${key}`,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(payload)
        }
      },
      (res) => {
        const chunks = []
        res.on("data", (c) => chunks.push(c))
        res.on("end", () => {
          let parsed
          try {
            parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"))
          } catch {
            parsed = undefined
          }
          resolve({ status: res.statusCode ?? 0, body: parsed })
        })
        res.on("error", reject)
      }
    )
    req.on("error", reject)
    req.end(payload)
  })

let guest = 0
const purchase = async () => {
  const productId = productIds[Math.floor(Math.random() * productIds.length)]
  guest++
  const checkout = await post("/v1/checkouts", {
    email: `guest.${guestPrefix}.${guest}@example.com`,
    lineItems: [{ productId, quantity: 1 + (guest % 3) }]
  })
  const checkoutId = checkout.body?.id
  if (checkout.status !== 201 || typeof checkoutId !== "string") return undefined
  const confirmed = await post(`/v1/checkouts/${checkoutId}/confirm`, { paymentMethod: "pm_card_visa" })
  const orderId = confirmed.body?.orderId
  return confirmed.status === 200 && confirmed.body?.status === "complete" && typeof orderId === "string"
    ? orderId
    : undefined
}

const deadline = performance.now() + seconds * 1000
const latencies = []
const orderIds = []
let failures = 0
const started = performance.now()
await Promise.all(
  Array.from({ length: connections }, async () => {
    while (performance.now() < deadline) {
      const t0 = performance.now()
      const orderId = await purchase().catch(() => undefined)
      if (orderId === undefined) failures++
      else {
        latencies.push(performance.now() - t0)
        orderIds.push(orderId)
      }
    }
  })
)
agent.destroy()
parentPort?.postMessage({ latencies, orderIds, failures, elapsedMs: performance.now() - started })
