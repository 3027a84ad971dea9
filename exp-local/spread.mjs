const mk = (i) => ({ type: "usage.recorded", data: { recordId: "r" + i, subscriptionId: "s", customerId: "c", meter: "m", identifier: "id" + i, value: 1, timestamp: new Date(), properties: {}, uniqueValue: null, periodStart: new Date(), periodEnd: null } })
const appended = { positions: Array.from({ length: 1 }, (_, i) => i), transactionId: "1", streamId: "x", eventIds: ["e"], recordedAt: new Date() }
const metadata = { actor: "x" }
let sink = 0
for (let round = 0; round < 5; round++) {
  const events = Array.from({ length: 100000 }, (_, i) => mk(i))
  const t = performance.now()
  for (const ev of events) {
    const r = [ev].map((event, i) => ({ ...event, globalPosition: appended.positions[i] ?? 0, transactionId: appended.transactionId, streamId: appended.streamId, streamVersion: 0 + i + 1, eventId: appended.eventIds[i] ?? "", schemaVersion: 1, metadata, recordedAt: appended.recordedAt }))
    sink += r.length
  }
  console.log(((performance.now() - t) * 1000 / 100000).toFixed(3), "µs per event")
}
for (let round = 0; round < 3; round++) {
  const events = Array.from({ length: 100000 }, (_, i) => mk(i))
  const t = performance.now()
  for (const ev of events) {
    const r = [ev].map((event, i) => ({ type: event.type, data: event.data, globalPosition: appended.positions[i] ?? 0, transactionId: appended.transactionId, streamId: appended.streamId, streamVersion: 0 + i + 1, eventId: appended.eventIds[i] ?? "", schemaVersion: 1, metadata, recordedAt: appended.recordedAt }))
    sink += r.length
  }
  console.log("explicit", ((performance.now() - t) * 1000 / 100000).toFixed(3), "µs per event")
}
for (let round = 0; round < 3; round++) {
  const events = Array.from({ length: 100000 }, (_, i) => mk(i))
  const t = performance.now()
  for (const ev of events) { sink += ev.data.value }
  console.log("loop only", ((performance.now() - t) * 1000 / 100000).toFixed(3), "µs per event")
}
