/**
 * Scopes are `<action>:<resource>` (design/API.md, Auth). `admin` is the scope of everything: the
 * admin role holds it, and an API key or OAuth client may be granted it. Customers (registered
 * shoppers) hold a fixed set and are further limited to their own records by each endpoint.
 */
export const RESOURCES = [
  "customers",
  "products",
  "orders",
  "checkouts",
  "payments",
  "subscriptions",
  "usage",
  "webhooks",
  "notifications",
  "apikeys",
  "events"
] as const
export type Resource = (typeof RESOURCES)[number]

export const ACTIONS = ["read", "write"] as const

import { ADMIN_SCOPE } from "../http/Auth.js"

export { ADMIN_SCOPE }

/** Every scope name a credential may carry. */
export const ALL_SCOPES: ReadonlyArray<string> = RESOURCES.flatMap((resource) =>
  ACTIONS.map((action) => `${action}:${resource}`)
)

const KNOWN = new Set<string>([ADMIN_SCOPE, ...ALL_SCOPES])

export const isKnownScope = (scope: string): boolean => KNOWN.has(scope)

export type Role = "admin" | "customer"

/** What a registered shopper may do (each endpoint also limits them to their own records). */
export const CUSTOMER_SCOPES: ReadonlyArray<string> = [
  "read:customers",
  "write:customers",
  "read:products",
  "read:orders",
  "read:checkouts",
  "write:checkouts",
  "read:subscriptions",
  "write:subscriptions",
  "read:payments",
  "read:usage"
]

export const scopesOfRole = (role: Role): ReadonlyArray<string> =>
  role === "admin" ? [ADMIN_SCOPE] : CUSTOMER_SCOPES

/** The permissions `GET /auth/me` lists: `admin` expands to every scope. */
export const permissionsOf = (scopes: Iterable<string>): ReadonlyArray<string> => {
  const set = new Set(scopes)
  return set.has(ADMIN_SCOPE) ? ALL_SCOPES : ALL_SCOPES.filter((s) => set.has(s))
}

/** Space-separated scope string (OAuth `scope`), in a stable order. */
export const formatScope = (scopes: Iterable<string>): string => {
  const set = new Set(scopes)
  return [...(set.has(ADMIN_SCOPE) ? [ADMIN_SCOPE] : []), ...ALL_SCOPES.filter((s) => set.has(s))].join(" ")
}

/** Parses a space-separated scope string into known scopes; unknown names are returned apart. */
export const parseScope = (
  value: string
): { readonly scopes: ReadonlyArray<string>; readonly unknown: ReadonlyArray<string> } => {
  const names = [...new Set(value.split(/\s+/).filter((s) => s !== ""))]
  return { scopes: names.filter(isKnownScope), unknown: names.filter((s) => !isKnownScope(s)) }
}
