/**
 * The liveness probe is answered by the outermost middleware (issue #17), not by the router and its
 * handler: the response must be the one the `health` handler gives (which answers `/health` with a
 * query string, the same route through the whole pipeline), with its own request id; other methods
 * keep the pipeline's answers (405 with Allow, HEAD).
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { TestHttp } from "../support/http.js"

const get = (path: string) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const response = yield* client.execute(HttpClientRequest.get(path))
    return { status: response.status, headers: response.headers, body: yield* response.text }
  })

/** The headers a response would carry anyway, minus the per-response ones. */
const comparable = (headers: Readonly<Record<string, string>>) => {
  const { "request-id": _id, date: _date, ...rest } = headers
  return rest
}

layer(TestHttp, { excludeTestServices: true, timeout: 60_000 })("GET /health", (it) => {
  it.effect("answers as the handler does, with a request id of its own", () =>
    Effect.gen(function* () {
      const probe = yield* get("/health")
      const routed = yield* get("/health?via=router")
      expect(probe.status).toBe(200)
      expect(JSON.parse(probe.body)).toEqual({ status: "ok" })
      expect(probe.body).toBe(routed.body)
      expect(comparable(probe.headers)).toEqual(comparable(routed.headers))
      expect(probe.headers["content-type"]).toBe("application/json")
      expect(probe.headers["request-id"]).toMatch(/^req_[A-Za-z0-9_-]{16}$/)
      expect(probe.headers["request-id"]).not.toBe(routed.headers["request-id"])
    })
  )

  it.effect("other methods still get the pipeline's answers", () =>
    Effect.gen(function* () {
      const client = yield* HttpClient.HttpClient
      const post = yield* client.execute(HttpClientRequest.post("/health"))
      expect(post.status).toBe(405)
      expect(post.headers.allow).toBe("GET, HEAD")
      const head = yield* client.execute(HttpClientRequest.head("/health"))
      expect(head.status).toBe(200)
      expect(head.headers["request-id"]).toMatch(/^req_/)
    })
  )
})
