/**
 * List conventions of the base surface (design/API.md "Lists"): `page` (≥ 1, default 1), `display`
 * (1–100, default 20; outside → 400) and a `{ count, models }` response.
 */
import { Schema } from "effect"

const IntFromString = (name: string, min: number, max: number) =>
  Schema.NumberFromString.pipe(
    Schema.int({ message: () => `${name} must be an integer` }),
    Schema.between(min, max, { message: () => `${name} must be between ${min} and ${max}` })
  )

export const MAX_DISPLAY = 100

export const PageParams = Schema.Struct({
  page: Schema.optionalWith(IntFromString("page", 1, 1_000_000), { default: () => 1 }),
  display: Schema.optionalWith(IntFromString("display", 1, MAX_DISPLAY), { default: () => 20 })
})
export type PageParams = typeof PageParams.Type

export const ListOf = <A, I, R>(model: Schema.Schema<A, I, R>, identifier: string) =>
  Schema.Struct({ count: Schema.Int, models: Schema.Array(model) }).annotations({ identifier })
