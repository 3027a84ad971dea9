/** The services the composition root provides to handlers and processors. */
import type { SqlClient } from "@effect/sql"
import type { AppConfig } from "./config.js"
import type { AppendSignal } from "./eventstore/AppendSignal.js"
import type { EventStore } from "./eventstore/EventStore.js"
import type { Keyring } from "./eventstore/Keyring.js"
import type { CommandRunner } from "./kernel/CommandRunner.js"
import type { DueWork } from "./processors/DueWork.js"

export type ProcessorServices =
  | SqlClient.SqlClient
  | AppConfig
  | AppendSignal
  | EventStore
  | Keyring
  | CommandRunner
  | DueWork
