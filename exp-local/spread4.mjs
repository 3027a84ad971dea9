const mk = (i) => ({ type: "usage.recorded", data: { recordId: "r" + i, value: 1 } })
const appended = { positions: [0], transactionId: "1", streamId: "x", eventIds: ["e"], recordedAt: new Date() }
const metadata = { actor: "x" }
let sink = 0
const env = (i) => ({ globalPosition: appended.positions[i] ?? 0, transactionId: appended.transactionId, streamId: appended.streamId, streamVersion: i + 1, eventId: appended.eventIds[i] ?? "", schemaVersion: 1, metadata, recordedAt: appended.recordedAt })
const variants = {
  assignOntoClone: (event, i) => Object.assign({ ...event }, env(i)),
  spreadBoth: (event, i) => ({ ...event, ...env(i) }),
  spreadLast: (event, i) => ({ ...env(i), ...event }),
}
for (let round = 0; round < 3; round++) for (const [name, f] of Object.entries(variants)) {
  const events = Array.from({ length: 200000 }, (_, i) => mk(i))
  const t = performance.now()
  for (const ev of events) { const r = [ev].map(f); sink += r.length }
  console.log(name.padEnd(16), ((performance.now() - t) * 1000 / 200000).toFixed(3), "µs")
}
