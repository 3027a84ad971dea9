/**
 * The current user's profile for `/auth/me`, kept a second: a client polling it costs one query a
 * second, not one per request. Changes made in this process drop the entry at once (identity's use
 * cases and its port); another instance's change (a login elsewhere) shows within `PROFILE_CACHE_MS`.
 */
import { Context, Effect, Layer } from "effect"
import type { UserRow } from "./queries.js"

export const PROFILE_CACHE_MS = 1_000
const PROFILE_CACHE_SIZE = 10_000

export interface ProfileCacheShape {
  /** The cached row, if read less than `PROFILE_CACHE_MS` before `nowMs`. */
  readonly get: (userId: string, nowMs: number) => UserRow | undefined
  readonly remember: (userId: string, user: UserRow, at: number) => void
  readonly forget: (userId: string) => Effect.Effect<void>
}

export class ProfileCache extends Context.Tag("identity/ProfileCache")<ProfileCache, ProfileCacheShape>() {}

export const ProfileCacheLive = Layer.sync(ProfileCache, (): ProfileCacheShape => {
  const profiles = new Map<string, { readonly user: UserRow; readonly at: number }>()
  return {
    get: (userId, nowMs) => {
      const cached = profiles.get(userId)
      return cached !== undefined && nowMs - cached.at < PROFILE_CACHE_MS ? cached.user : undefined
    },
    remember: (userId, user, at) => {
      if (profiles.size >= PROFILE_CACHE_SIZE) profiles.clear()
      profiles.set(userId, { user, at })
    },
    forget: (userId) => Effect.sync(() => void profiles.delete(userId))
  }
})
