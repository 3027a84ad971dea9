import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Each test file gets its own database; files run one at a time so timing-sensitive
    // concurrency tests (the gap test) get the whole 2-core machine.
    fileParallelism: false
  }
})
