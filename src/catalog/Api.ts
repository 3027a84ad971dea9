/**
 * The products HTTP contract on `/v1` (spec §4.5; COMMERCE decision 1; research §1.1): Stripe's
 * conventions (`object`, camelCase, list objects with `limit`/`startingAfter`/`endingBefore`).
 * Writes need `write:products` (staff); reads `read:products`, which shoppers hold: they see only
 * active products, anything else is 404 to them.
 *
 * Every rule a request can break on its own is stated in these schemas (so the OpenAPI document
 * says it, and requests drawn from the schemas are ones the service accepts —
 * test/http/schema-property.test.ts); what depends on the product's state (stock below what is
 * reserved, a SKU taken) is the use case's.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Conflict } from "../http/errors.js"
import { IntField, Text } from "../http/Fields.js"
import { V1List, v1ListParams } from "../http/Lists.js"
import { Metadata, MetadataInput } from "../kernel/Metadata.js"
import { isIsoCurrency, isoCurrencies } from "../kernel/Money.js"
import { AGGREGATIONS, INTERVALS, MAX_AMOUNT, MAX_QUANTITY, PRICE_TYPES, PRODUCT_STATUSES } from "./events.js"

const Flag = (field: string) =>
  Schema.Boolean.annotations({ message: () => `${field} must be true or false` })

const OneOf = <const L extends ReadonlyArray<string>>(field: string, values: L) =>
  Schema.Literal(...values).annotations({
    message: () => ({ message: `${field} must be one of ${values.join(", ")}`, override: true })
  })

/** Stripe's limit on a recurring interval: at most three years. */
const MAX_INTERVAL_COUNT: Readonly<Record<(typeof INTERVALS)[number], number>> = {
  day: 1095,
  week: 156,
  month: 36,
  year: 3
}

/** An ISO 4217 code in either case, stored uppercase (research: "we normalize input of either case"). */
const CurrencyInput = Schema.transform(
  Schema.String.annotations({ message: () => "currency must be an ISO 4217 currency code, e.g. USD" }),
  Schema.String.pipe(
    Schema.filter((code) => isIsoCurrency(code), {
      message: () => "currency must be an ISO 4217 currency code, e.g. USD"
    })
  ),
  { strict: true, decode: (code) => code.toUpperCase(), encode: (code) => code }
).annotations({
  jsonSchema: {
    type: "string",
    enum: [...isoCurrencies()],
    description: "ISO 4217, uppercase (lowercase accepted)"
  },
  arbitrary: () => (fc) => fc.constantFrom(...isoCurrencies())
})

/**
 * A field the server computes: sending it at all is a 400 naming it (research §1.1: reserved and
 * available are read-only). Absent from requests drawn from the schema.
 */
const ReadOnly = (field: string, why: string) =>
  Schema.Unknown.pipe(
    Schema.filter((value) => value === undefined, { message: () => `${field} is read-only: ${why}` })
  ).annotations({
    jsonSchema: { readOnly: true, description: `Read-only: ${why}. Sending it is a 400.` },
    arbitrary: () => (fc) => fc.constant(undefined)
  })

const UsageInput = Schema.Struct({
  meter: Text("meter", 100),
  aggregation: OneOf("aggregation", AGGREGATIONS),
  unitAmount: IntField("unitAmount", 0, MAX_AMOUNT),
  includedUnits: Schema.optional(IntField("includedUnits", 0, MAX_QUANTITY)),
  uniqueKey: Schema.optional(Text("uniqueKey", 40))
}).pipe(
  Schema.filter((u) =>
    u.aggregation === "unique_count" && u.uniqueKey === undefined
      ? { path: ["uniqueKey"], message: "uniqueKey is required with aggregation unique_count" }
      : u.aggregation !== "unique_count" && u.uniqueKey !== undefined
        ? { path: ["uniqueKey"], message: "uniqueKey is only for aggregation unique_count" }
        : undefined
  )
)

const RecurringInput = Schema.Struct({
  interval: OneOf("interval", INTERVALS),
  intervalCount: Schema.optional(IntField("intervalCount", 1, MAX_INTERVAL_COUNT.day)),
  trialPeriodDays: Schema.optional(IntField("trialPeriodDays", 0, 730)),
  usage: Schema.optional(UsageInput)
}).pipe(
  Schema.filter((r) =>
    r.intervalCount !== undefined && r.intervalCount > MAX_INTERVAL_COUNT[r.interval]
      ? {
          path: ["intervalCount"],
          message: `intervalCount must be at most ${MAX_INTERVAL_COUNT[r.interval]} for interval ${r.interval} (three years)`
        }
      : undefined
  )
)

/** The whole price (create, and PATCH, which replaces it whole). */
export const PriceInput = Schema.Struct({
  amount: IntField("amount", 0, MAX_AMOUNT),
  currency: CurrencyInput,
  type: Schema.optional(OneOf("type", PRICE_TYPES)),
  recurring: Schema.optional(RecurringInput)
}).pipe(
  Schema.filter((p) => {
    if (p.type === "recurring" && p.recurring === undefined)
      return { path: ["recurring"], message: "recurring is required when type is recurring" }
    if (p.type !== "recurring" && p.recurring !== undefined)
      return { path: ["type"], message: 'type must be "recurring" when recurring is given' }
    return undefined
  })
)
export type PriceInput = typeof PriceInput.Type

const READ_ONLY_RESERVED = "it moves with reservations (checkouts and orders)"
const READ_ONLY_AVAILABLE = "it is stockedQuantity − reservedQuantity"

const InventoryFields = {
  tracked: Schema.optional(Flag("tracked")),
  stockedQuantity: Schema.optional(IntField("stockedQuantity", 0, MAX_QUANTITY)),
  lowStockThreshold: Schema.optional(IntField("lowStockThreshold", 0, MAX_QUANTITY)),
  allowBackorder: Schema.optional(Flag("allowBackorder")),
  reservedQuantity: Schema.optional(ReadOnly("reservedQuantity", READ_ONLY_RESERVED)),
  availableQuantity: Schema.optional(ReadOnly("availableQuantity", READ_ONLY_AVAILABLE))
}

const InventoryInput = Schema.Struct(InventoryFields)

const AdjustBy = IntField("adjustBy", -MAX_QUANTITY, MAX_QUANTITY).annotations({
  // Drawn requests add stock: taking more than a product holds is a state-dependent 400.
  arbitrary: () => (fc) => fc.integer({ min: 0, max: 1000 })
})

const InventoryPatch = Schema.Struct({ ...InventoryFields, adjustBy: Schema.optional(AdjustBy) }).pipe(
  Schema.filter((i) =>
    i.adjustBy !== undefined && i.stockedQuantity !== undefined
      ? { path: ["adjustBy"], message: "adjustBy and stockedQuantity cannot both be given: choose one" }
      : undefined
  )
)

const Description = Schema.String.annotations({ message: () => "description must be a string" }).pipe(
  Schema.maxLength(5000, { message: () => "description must be at most 5000 characters" })
)

const Sku = Text("sku", 100)

const ImageUrl = Schema.String.pipe(
  Schema.pattern(/^https?:\/\/\S+$/, { message: () => "images must be http(s) URLs" }),
  Schema.maxLength(2048, { message: () => "images must be URLs of at most 2048 characters" })
)
const Images = Schema.Array(ImageUrl)
  .pipe(Schema.maxItems(20, { message: () => "images can hold at most 20 URLs" }))
  .annotations({ message: () => ({ message: "images must be an array of http(s) URLs", override: false }) })

const MetadataObject = MetadataInput.annotations({ message: () => "metadata must be a JSON object" })

export const NewProduct = Schema.Struct({
  name: Text("name", 250),
  description: Schema.optional(Schema.NullOr(Description)),
  sku: Schema.optional(Schema.NullOr(Sku)),
  status: Schema.optional(OneOf("status", ["draft", "active"] as const)),
  price: PriceInput,
  inventory: Schema.optional(InventoryInput),
  images: Schema.optional(Images),
  metadata: Schema.optional(MetadataObject)
})
export type NewProductInput = typeof NewProduct.Type

export const ProductPatch = Schema.Struct({
  name: Schema.optional(Text("name", 250)),
  description: Schema.optional(Schema.NullOr(Description)),
  sku: Schema.optional(Schema.NullOr(Sku)),
  status: Schema.optional(OneOf("status", PRODUCT_STATUSES)),
  price: Schema.optional(PriceInput),
  inventory: Schema.optional(InventoryPatch),
  images: Schema.optional(Images),
  metadata: Schema.optional(Schema.NullOr(MetadataObject))
})
export type ProductPatchInput = typeof ProductPatch.Type

export const ProductListParams = Schema.Struct({
  ...v1ListParams("prod").fields,
  status: Schema.optional(OneOf("status", PRODUCT_STATUSES)),
  type: Schema.optional(OneOf("type", PRICE_TYPES)),
  q: Schema.optional(
    Schema.String.pipe(Schema.maxLength(100, { message: () => "q must be at most 100 characters" }))
  ),
  includeArchived: Schema.optional(OneOf("includeArchived", ["true", "false"] as const))
})
export type ProductListParams = typeof ProductListParams.Type

// --- The product object ------------------------------------------------------------------------------

const Usage = Schema.Struct({
  meter: Schema.String,
  aggregation: Schema.Literal(...AGGREGATIONS),
  unitAmount: Schema.Int,
  includedUnits: Schema.Int,
  /** unique_count only: the `properties` key whose distinct values are counted. */
  uniqueKey: Schema.optional(Schema.String)
})

export const Price = Schema.Struct({
  /** Integer minor units of `currency`. */
  amount: Schema.Int,
  currency: Schema.String,
  type: Schema.Literal(...PRICE_TYPES),
  recurring: Schema.NullOr(
    Schema.Struct({
      interval: Schema.Literal(...INTERVALS),
      intervalCount: Schema.Int,
      trialPeriodDays: Schema.NullOr(Schema.Int),
      usage: Schema.NullOr(Usage)
    })
  ),
  /** 1 at creation, +1 per price change: orders and subscriptions snapshot the price with it. */
  version: Schema.Int
}).annotations({ identifier: "ProductPrice" })

export const Inventory = Schema.Struct({
  /** false: unlimited (nothing is held or counted). */
  tracked: Schema.Boolean,
  stockedQuantity: Schema.Int,
  /** Held by open checkouts and unfulfilled orders. */
  reservedQuantity: Schema.Int,
  /** stockedQuantity − reservedQuantity (below 0 only with backorders). */
  availableQuantity: Schema.Int,
  lowStockThreshold: Schema.Int,
  allowBackorder: Schema.Boolean
}).annotations({ identifier: "ProductInventory" })

export const Product = Schema.Struct({
  object: Schema.Literal("product"),
  id: Schema.String,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  sku: Schema.NullOr(Schema.String),
  status: Schema.Literal(...PRODUCT_STATUSES),
  price: Price,
  inventory: Inventory,
  images: Schema.Array(Schema.String),
  metadata: Metadata,
  /** When it was archived (DELETE, or PATCH status archived); null otherwise. */
  deletedAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Product" })

// --- Endpoints ---------------------------------------------------------------------------------------

const PRICE_RULES =
  "`price`: `amount` (integer minor units ≥ 0), `currency` (ISO 4217), `type` `one_time` (default) or " +
  "`recurring` with `recurring {interval: day|week|month|year, intervalCount ≥ 1 (at most three years), " +
  "trialPeriodDays?, usage? {meter, aggregation: sum|count|max|last|unique_count, unitAmount, includedUnits?, uniqueKey? (required with unique_count, else not allowed)}}`."
const INVENTORY_RULES =
  "`inventory`: `tracked` (default: true when `stockedQuantity` is given), `stockedQuantity`, " +
  "`lowStockThreshold` (default 5), `allowBackorder` (default false); `reservedQuantity` and " +
  "`availableQuantity` are read-only (400 if sent)."

export class ProductsApi extends HttpApiGroup.make("products")
  .add(
    HttpApiEndpoint.post("create", "/v1/products")
      .setPayload(NewProduct)
      .addSuccess(Product, { status: 201 })
      .addError(Conflict)
      .pipe(scoped("write:products"))
      .annotate(OpenApi.Summary, "Create a product with its price and inventory")
      .annotate(
        OpenApi.Description,
        `\`name\` and \`price\` are required. ${PRICE_RULES} ${INVENTORY_RULES} \`sku\` is unique: a ` +
          "duplicate → 409 `resource_already_exists`. `status` `active` (default) or `draft`."
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/products")
      .setUrlParams(ProductListParams)
      .addSuccess(V1List(Product, "ProductList"))
      .pipe(scoped("read:products"))
      .annotate(OpenApi.Summary, "List products, newest first")
      .annotate(
        OpenApi.Description,
        "Filters: `status`, `type` (price type), `q` (case-insensitive substring of name or SKU), " +
          "`includeArchived` (archived products are left out unless asked for, or `status=archived`). " +
          "`limit` 1–100 (default 10); `startingAfter` / `endingBefore` (product ids), not both. " +
          "Shoppers see active products only."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/products/:id")
      .addSuccess(Product)
      .pipe(scoped("read:products"), byId)
      .annotate(OpenApi.Summary, "A product (archived ones too; shoppers: active ones only)")
  )
  .add(
    HttpApiEndpoint.patch("update", "/v1/products/:id")
      .setPayload(ProductPatch)
      .addSuccess(Product)
      .addError(Conflict)
      .pipe(scoped("write:products"), byId)
      .annotate(OpenApi.Summary, "Change a product: only the fields sent")
      .annotate(
        OpenApi.Description,
        "`price` is replaced whole (earlier orders and subscriptions keep the price they captured; " +
          "`price.version` counts the changes). `metadata` is merged (a key set to null is removed, " +
          "`metadata: null` clears it). `inventory.stockedQuantity` sets the stock, `inventory.adjustBy` " +
          "moves it atomically (+/−), not both; stock never goes below 0, nor below what is reserved " +
          "unless `allowBackorder` (400). Archiving a product held by open reservations → 409 `resource_in_use`."
      )
  )
  .add(
    HttpApiEndpoint.del("archive", "/v1/products/:id")
      .addSuccess(Product)
      .addError(Conflict)
      .pipe(scoped("write:products"), byId)
      .annotate(OpenApi.Summary, "Archive a product (still readable by id, gone from the default list)")
      .annotate(
        OpenApi.Description,
        "Answers the archived product (`status: archived`, `deletedAt`); publishes `product.deleted`. " +
          "A product held by open reservations → 409 `resource_in_use`. Archiving twice is a no-op."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Products (v1)")
  .annotate(
    OpenApi.Description,
    "The catalogue: products with one embedded price (one-time or recurring, optionally metered) and " +
      "inventory that never oversells (checkouts reserve atomically)."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const CatalogRoutes = ApiBase.add(ProductsApi)
