# commerce-platform — production image.
#
#   docker build -t commerce-platform .
#   docker run --rm -p 3000:3000 \
#     -e DATABASE_URL=postgres://user:pass@db-host:5432/commerce \
#     -e DATA_ENCRYPTION_KEY="$(openssl rand -hex 32)" \
#     commerce-platform
#
# Keep DATA_ENCRYPTION_KEY somewhere safe: it wraps the per-subject data keys, so personal data is
# unreadable without it. With NODE_ENV=production (set below) the service refuses to start without
# it. Migrations run at start-up; `docker run … commerce-platform npm run migrate` runs them alone.
# Without DATABASE_URL the service runs embedded PostgreSQL (PGlite) under /app/.data — mount a
# volume there if you use that mode, or the data goes away with the container.
#
# The service runs TypeScript through `tsx`, which package.json lists under `dependencies` (not
# devDependencies), so `npm ci --omit=dev` installs everything the process needs at run time.

# ---- dependencies: production packages only, from the lockfile ----
FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# ---- runtime ----
FROM node:20-bookworm-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/app/.data
WORKDIR /app

# Code and dependencies belong to root and are read-only to the service; only the data directory
# (generated keys, embedded database) is writable by the unprivileged `node` user (uid 1000) the
# Node images ship with.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json tsconfig.json ./
COPY migrations ./migrations
COPY scripts ./scripts
COPY src ./src
RUN mkdir -p /app/.data && chown node:node /app/.data

USER node
EXPOSE 3000

# Slim images have no curl; Node 20 has fetch. A ROLE=worker container serves no HTTP: override or
# disable this check for it (compose: `healthcheck: { disable: true }`).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# Exec form, and node itself rather than `npm start`: `docker stop` sends SIGTERM to PID 1. Under
# `npm start` (or a shell-form CMD) PID 1 would be npm or /bin/sh, which do not reliably pass the
# signal on, so the service would get no chance to drain and be SIGKILLed after the stop timeout.
# `tsx`'s own CLI would also add a parent process that relays signals; loading tsx with `--import`
# keeps a single Node process that receives SIGTERM and shuts down within SHUTDOWN_TIMEOUT_SECONDS
# (give `docker stop -t` / compose `stop_grace_period` a few seconds more than that).
# --max-semi-space-size=64 as in `npm start`: a larger young generation for the many short-lived
# objects of each request (the README's hot-path benchmark says what it saves).
CMD ["node", "--max-semi-space-size=64", "--import", "tsx", "src/main.ts"]
