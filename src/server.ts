/** The service's HTTP server: the root `Api` and its handlers on the shared machinery of http/Server.ts. */
import { HttpServer } from "@effect/platform"
import { Layer } from "effect"
import { Api, ApiLive, FastRoutesLive } from "./Api.js"
import { httpAppLayer, NodeServerLive } from "./http/Server.js"

/** The routes and middleware, independent of the socket (tests use NodeHttpServer.layerTest). */
export const HttpAppLive = httpAppLayer(Api, ApiLive, FastRoutesLive)

/** On a Node HTTP server at HOST:PORT. */
export const HttpLive = HttpAppLive.pipe(HttpServer.withLogAddress, Layer.provide(NodeServerLive))
