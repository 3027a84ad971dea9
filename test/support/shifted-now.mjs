// Preloaded into a worker process (test/support/workers.ts): its Date.now, which Effect's Clock
// reads, runs TEST_CLOCK_AHEAD_MS ahead of real time, so due work falls due as if that time had passed.
const ahead = Number(process.env.TEST_CLOCK_AHEAD_MS ?? "0")
const realNow = Date.now
if (Number.isFinite(ahead) && ahead !== 0) Date.now = () => realNow() + ahead
