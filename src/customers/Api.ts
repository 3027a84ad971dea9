/**
 * The customers HTTP contract (spec §2.4, §4.2; design/API.md "Gaps in the base surface, filled"):
 * `/user` with addresses, tags, metadata, search, deactivation and erasure. Shoppers reach their own
 * record through the same routes (or `/user/me`); another customer's id answers 404.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication, StaffOnly } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Conflict, NotFound } from "../http/errors.js"
import { Instant, StoredEmail, Text } from "../http/Fields.js"
import { ListOf, PageParams, SortParam } from "../http/Lists.js"
import { EmailSchema } from "../kernel/Email.js"
import { Metadata, MetadataInput } from "../kernel/Metadata.js"
import { LIMITS } from "./decider.js"
import { SORT_FIELDS } from "./queries.js"

// --- Field schemas ---------------------------------------------------------------------------------

const COUNTRIES = new Set(
  (
    "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ " +
    "BL BM BN BO BQ BR BS BT BV BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR " +
    "CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR " +
    "GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU " +
    "ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ " +
    "LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK ML MM MN MO MP MQ " +
    "MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF " +
    "PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI " +
    "SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR " +
    "TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS XK YE YT ZA ZM ZW"
  ).split(" ")
)

/** ISO 3166-1 alpha-2, any case on input, upper case stored; documented as the list of codes. */
const Country = Schema.Trim.pipe(
  Schema.compose(Schema.Uppercase),
  Schema.filter((code) => COUNTRIES.has(code), {
    message: () => "country must be a two-letter ISO 3166-1 code such as US or DE",
    jsonSchema: { type: "string", enum: [...COUNTRIES] },
    arbitrary: () => (fc) => fc.constantFrom(...COUNTRIES)
  })
)

/** Digits with the usual separators, at least 4 digits, an optional leading `+`. */
const PHONE = /^\+?[ ().-]*(?:[0-9][ ().-]*){4,32}$/

/** Digits with the usual separators and an optional leading `+` (E.164 is recommended for SMS). */
const Phone = Schema.Trim.pipe(
  Schema.filter((phone) => phone.length <= 32 && PHONE.test(phone), {
    message: () =>
      "phone must be a phone number such as +14155550123 (digits, spaces, ( ) . - and a leading +)",
    jsonSchema: { type: "string", pattern: PHONE.source, maxLength: 32 }
  })
)

const Tag = Text("tag", LIMITS.tagLength)

const TagList = Schema.Array(Tag).pipe(
  Schema.maxItems(LIMITS.tags, { message: () => `tags must have at most ${LIMITS.tags} entries` })
)

const MetadataObject = MetadataInput.annotations({ message: () => "metadata must be a JSON object" })

const OptionalText = (field: string, max: number) => Schema.optional(Schema.NullOr(Text(field, max)))

// --- Shapes ----------------------------------------------------------------------------------------

export const Address = Schema.Struct({
  id: Schema.String,
  label: Schema.NullOr(Schema.String),
  line1: Schema.String,
  city: Schema.String,
  state: Schema.NullOr(Schema.String),
  postalCode: Schema.NullOr(Schema.String),
  country: Schema.String,
  isDefault: Schema.Boolean
}).annotations({ identifier: "Address" })

export const Customer = Schema.Struct({
  id: Schema.String,
  email: StoredEmail,
  firstName: Schema.String,
  lastName: Schema.String,
  phone: Schema.NullOr(Schema.String),
  metadata: Metadata,
  addresses: Schema.Array(Address),
  orderCount: Schema.Int,
  /** Minor units of the store currency (net of refunds). */
  totalSpent: Schema.Int,
  tags: Schema.Array(Schema.String),
  active: Schema.Boolean,
  /** A registered shopper can log in as this customer. */
  hasAccount: Schema.Boolean,
  /** The billing test clock the customer lives on (`POST /user {testClockId}`), else null. */
  testClockId: Schema.NullOr(Schema.String),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Customer" })

/** The reduced customer of `GET /user` (spec §2.4). */
export const CustomerSummary = Customer.pick(
  "id",
  "email",
  "firstName",
  "lastName",
  "orderCount",
  "totalSpent",
  "createdAt"
).annotations({ identifier: "CustomerSummary" })

/** What `POST /user` answers (spec §2.4). */
export const CreatedCustomer = Customer.pick("id", "email", "firstName", "lastName", "createdAt").annotations(
  {
    identifier: "CreatedCustomer"
  }
)

// --- Requests --------------------------------------------------------------------------------------

export const CustomerListParams = Schema.Struct({
  ...PageParams.fields,
  sort: Schema.optional(SortParam(SORT_FIELDS)),
  q: Schema.optional(
    Schema.String.pipe(Schema.maxLength(200, { message: () => "q must be at most 200 characters" }))
  ),
  tag: Schema.optional(
    Schema.String.pipe(
      Schema.maxLength(LIMITS.tagLength, {
        message: () => `tag must be at most ${LIMITS.tagLength} characters`
      })
    )
  ),
  since: Schema.optional(Instant("since"))
})

export const NewCustomer = Schema.Struct({
  email: EmailSchema,
  firstName: Text("firstName"),
  lastName: Text("lastName"),
  phone: Schema.optional(Schema.NullOr(Phone)),
  tags: Schema.optional(TagList),
  metadata: Schema.optional(MetadataObject),
  testClockId: Schema.optional(
    Schema.String.pipe(
      Schema.pattern(/^clock_[0-7][0-9a-hjkmnp-tv-z]{25}$/, {
        message: () => "testClockId must be a test clock id (clock_…)"
      })
    )
  )
})

const CustomerPatch = Schema.Struct({
  email: Schema.optional(EmailSchema),
  firstName: Schema.optional(Text("firstName")),
  lastName: Schema.optional(Text("lastName")),
  phone: Schema.optional(Schema.NullOr(Phone)),
  metadata: Schema.optional(Schema.NullOr(MetadataObject)),
  tags: Schema.optional(TagList),
  active: Schema.optional(Schema.Boolean)
})

const NewAddress = Schema.Struct({
  label: OptionalText("label", 100),
  line1: Text("line1", 200),
  city: Text("city", 100),
  state: OptionalText("state", 100),
  postalCode: OptionalText("postalCode", 20),
  country: Country,
  isDefault: Schema.optional(Schema.Boolean)
})

const NewTags = Schema.Struct({
  tags: TagList.pipe(Schema.minItems(1, { message: () => "tags must name at least one tag" }))
})

// --- Endpoints ---------------------------------------------------------------------------------------

const ME = "A shopper may use their own id or `me`; another customer's id answers 404."

export class CustomersApi extends HttpApiGroup.make("customers")
  .add(
    HttpApiEndpoint.get("list", "/user")
      .setUrlParams(CustomerListParams)
      .addSuccess(ListOf(CustomerSummary, "CustomerList"))
      .pipe(scoped("read:customers"))
      .annotate(OpenApi.Summary, "List customers (reduced shape), filtered, searched and sorted")
      .annotate(
        OpenApi.Description,
        "`q`: case-insensitive substring of first name, last name or email (`ada lovelace` matches across the names). " +
          "`tag`: customers carrying this exact tag. `since`: created strictly after this instant. " +
          `\`sort\`: \`<field>:<asc|desc>\` with field ${SORT_FIELDS.join(", ")} (default \`createdAt:desc\`; ` +
          "ties are ordered by id). `page` ≥ 1, `display` 1–100 (default 20). A shopper sees only their own record."
      )
  )
  .add(
    HttpApiEndpoint.post("create", "/user")
      .setPayload(NewCustomer)
      .addSuccess(CreatedCustomer, { status: 201 })
      .addError(Conflict)
      .pipe(scoped("write:customers"))
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "Create a customer record (without a login); a used email → 409")
      .annotate(
        OpenApi.Description,
        "`email`, `firstName` and `lastName` are required. `metadata`: at most 50 keys of up to 40 characters, " +
          "8 KiB as JSON. `tags`: at most 100, each 1–64 characters, duplicates dropped. `testClockId` (test " +
          "processor only): the customer lives on that test clock (`/v1/test/clocks`); an unknown or deleted " +
          "clock → 400 `resource_missing` on `testClockId`."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/user/:id")
      .addSuccess(Customer)
      .pipe(scoped("read:customers"), byId)
      .annotate(OpenApi.Summary, "A customer with addresses, tags, metadata and order totals")
      .annotate(OpenApi.Description, ME)
  )
  .add(
    HttpApiEndpoint.put("update", "/user/:id")
      .setPayload(CustomerPatch)
      .addSuccess(Customer)
      .addError(Conflict)
      .pipe(scoped("write:customers"), byId)
      .annotate(
        OpenApi.Summary,
        "Change any of email, names, phone, metadata, tags, active; returns the customer"
      )
      .annotate(
        OpenApi.Description,
        "Only the fields sent change. `tags` replaces the list. `metadata` is merged: a key set to null is " +
          "removed, and `metadata: null` clears it. `active: false` deactivates the customer (reversible): a " +
          "registered shopper can no longer log in, refresh or check out, and their sessions end; `active: true` " +
          "reactivates. A registered shopper's login email and name follow their record. Shoppers may change " +
          `their own email, names and phone only (other fields → 403). ${ME}`
      )
  )
  .add(
    HttpApiEndpoint.del("erase", "/user/:id")
      .addSuccess(HttpApiSchema.NoContent)
      .pipe(scoped("write:customers"), byId)
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "Erase a customer permanently (crypto-shredding); prefer `active: false`")
      .annotate(
        OpenApi.Description,
        "The customer's encryption key (and their login's) is destroyed: personal data in the event log can no " +
          "longer be read, the record and its login disappear, the login's tokens stop working, and the email " +
          "can be used again. Ids, amounts and the history of what happened stay. A later GET answers 404."
      )
  )
  .add(
    HttpApiEndpoint.post("addAddress", "/user/:id/address")
      .setPayload(NewAddress)
      .addSuccess(Address, { status: 201 })
      .addError(Conflict)
      .pipe(scoped("write:customers"), byId)
      .annotate(
        OpenApi.Summary,
        "Add an address; the first one (or one sent with isDefault) becomes the default"
      )
      .annotate(
        OpenApi.Description,
        `\`line1\`, \`city\` and \`country\` (ISO 3166-1 alpha-2) are required. At most ${LIMITS.addresses} addresses (then 409). ${ME}`
      )
  )
  .add(
    HttpApiEndpoint.del("removeAddress", "/user/:id/address/:address_id")
      .setPath(Schema.Struct({ id: Schema.String, address_id: Schema.String }))
      .addSuccess(HttpApiSchema.NoContent)
      .addError(NotFound)
      .pipe(scoped("write:customers"))
      .annotate(
        OpenApi.Summary,
        "Remove an address; when it was the default, the oldest remaining one takes over"
      )
      .annotate(OpenApi.Description, ME)
  )
  .add(
    HttpApiEndpoint.post("tag", "/user/:id/tag")
      .setPayload(NewTags)
      .addSuccess(Customer)
      .pipe(scoped("write:customers"), byId)
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "Add tags (set union, order kept); returns the customer")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Customers")
  .annotate(
    OpenApi.Description,
    "Customer records with addresses, tags and metadata: staff manage them all, a shopper only their own " +
      "(`/user/me`)."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const CustomersRoutes = ApiBase.add(CustomersApi)
