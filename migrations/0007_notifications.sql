-- Notifications (src/notifications): the read models of notifications, templates and settings.
-- The event store is the source of truth; every table here can be rebuilt from it.
CREATE SCHEMA IF NOT EXISTS notifications;

CREATE TABLE notifications.notifications (
  notification_id      text        PRIMARY KEY,
  customer_id          text,
  event_name           text        NOT NULL,
  channel              text        NOT NULL,
  recipient            text        NOT NULL,
  -- `to` filters match case-insensitively for email (addresses are compared lower-cased).
  recipient_normalized text        NOT NULL,
  status               text        NOT NULL,
  subject              text,
  title                text,
  body                 text,
  template_id          text,
  data                 jsonb       NOT NULL DEFAULT '{}',
  metadata             jsonb       NOT NULL DEFAULT '{}',
  scheduled_at         timestamptz,
  parent_id            text,
  source_event_id      text,
  attempts             integer     NOT NULL DEFAULT 0,
  last_error           text,
  next_attempt_at      timestamptz,
  failure_reason       text,
  provider             text,
  provider_message_id  text,
  rendered             jsonb,
  sent_at              timestamptz,
  failed_at            timestamptz,
  cancelled_at         timestamptz,
  created_at           timestamptz NOT NULL,
  updated_at           timestamptz NOT NULL,
  version              integer     NOT NULL
);
-- GET /notification: newest first by default (the id breaks ties); the filters each have an index.
CREATE INDEX notifications_created_idx ON notifications.notifications (created_at, notification_id);
CREATE INDEX notifications_sent_idx ON notifications.notifications (sent_at, notification_id);
CREATE INDEX notifications_scheduled_idx ON notifications.notifications (scheduled_at, notification_id);
CREATE INDEX notifications_status_idx ON notifications.notifications (status, created_at);
CREATE INDEX notifications_recipient_idx ON notifications.notifications (recipient_normalized, created_at);
CREATE INDEX notifications_event_idx ON notifications.notifications (event_name, created_at);
-- Erasure deletes a customer's notifications.
CREATE INDEX notifications_customer_idx ON notifications.notifications (customer_id);

CREATE TABLE notifications.templates (
  template_id text        PRIMARY KEY,
  name        text        NOT NULL,
  channel     text        NOT NULL,
  subject     text,
  title       text,
  body        text        NOT NULL,
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL,
  version     integer     NOT NULL
);
CREATE INDEX templates_created_idx ON notifications.templates (created_at, template_id);

-- One row per trigger ever configured; triggers without a row use the defaults (email on).
CREATE TABLE notifications.settings (
  trigger     text        PRIMARY KEY,
  enabled     boolean     NOT NULL,
  channels    text[]      NOT NULL,
  template_id text,
  updated_at  timestamptz NOT NULL
);
