/** Customers' port (`CustomersPort` in `index.ts`): commands other contexts run in their transaction. */
import { Effect, Layer } from "effect"
import { CommandRunner } from "../kernel/CommandRunner.js"
import { CustomerDecider, customerStream } from "./decider.js"
import { CustomersPort } from "./index.js"

export const CustomersPortLive = Layer.effect(
  CustomersPort,
  Effect.map(CommandRunner, (runner) =>
    CustomersPort.of({
      createShopper: (record, metadata) =>
        Effect.asVoid(
          runner.execute(
            CustomerDecider,
            customerStream(record.customerId),
            { _tag: "Create", ...record, phone: null, tags: [], metadata: {} },
            { metadata }
          )
        )
    })
  )
)
