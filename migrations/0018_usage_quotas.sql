-- Usage and quotas (README "Usage and quotas").
--
-- usage_calls holds one row per model call (and per admitted request),
-- keyed by the call's id: a flush replayed after a failure, or a call
-- retried under the same id, inserts nothing the second time. usage_daily
-- sums the calls per day and dimension, in the statement that inserts
-- them, so reports read the sums. 0 stands for "none" in the id columns
-- (they are part of the key, which cannot hold NULL).
CREATE TABLE usage_calls (
    call_id           text PRIMARY KEY,
    at                timestamptz NOT NULL,
    user_id           bigint NOT NULL DEFAULT 0,
    key_id            bigint NOT NULL DEFAULT 0,
    kb_id             bigint NOT NULL DEFAULT 0,
    model             text NOT NULL DEFAULT '',
    kind              text NOT NULL,
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    requests          bigint NOT NULL DEFAULT 0,
    estimated         boolean NOT NULL DEFAULT false
);
CREATE INDEX usage_calls_at ON usage_calls (at);

CREATE TABLE usage_daily (
    day               date NOT NULL,
    user_id           bigint NOT NULL DEFAULT 0,
    key_id            bigint NOT NULL DEFAULT 0,
    kb_id             bigint NOT NULL DEFAULT 0,
    model             text NOT NULL DEFAULT '',
    kind              text NOT NULL,
    calls             bigint NOT NULL DEFAULT 0,
    requests          bigint NOT NULL DEFAULT 0,
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    estimated_tokens  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (day, user_id, key_id, kb_id, model, kind)
);
CREATE INDEX usage_daily_user ON usage_daily (user_id, day);
CREATE INDEX usage_daily_key ON usage_daily (key_id, day) WHERE key_id <> 0;

-- A quota per user, group or API key; 0 is no limit. subject_id points at
-- users, groups or api_keys by subject, so it has no foreign key: the
-- quota of a deleted subject limits nobody and is listed until removed.
CREATE TABLE quotas (
    subject          text NOT NULL CHECK (subject IN ('user', 'group', 'key')),
    subject_id       bigint NOT NULL,
    daily_tokens     bigint NOT NULL DEFAULT 0 CHECK (daily_tokens >= 0),
    monthly_tokens   bigint NOT NULL DEFAULT 0 CHECK (monthly_tokens >= 0),
    daily_requests   bigint NOT NULL DEFAULT 0 CHECK (daily_requests >= 0),
    monthly_requests bigint NOT NULL DEFAULT 0 CHECK (monthly_requests >= 0),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject, subject_id)
);
