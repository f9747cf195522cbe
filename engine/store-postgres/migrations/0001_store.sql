-- Schema 1 of the subs PostgreSQL store.
--
-- Every record is stored as the bytes of its JSON (bytea: no parsing or
-- validation on insert), beside the few columns queries need. Text keys
-- use the "C" collation, so ORDER BY compares bytes, as the other
-- backends (and Rust's String) order keys, whatever the database's
-- locale; and so the primary keys serve those orders.

-- Every session key (tenant, session id) is given a number, `sid`, the
-- first time anything is written for it; a session's records are keyed
-- by it. B-tree searches on one int8 cost a fraction of those on two text
-- columns, and every row written is searched twice (ON CONFLICT's check,
-- then the index insert). Numbers are never reused or changed.
CREATE TABLE session_ids (
    sid     int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant  text COLLATE "C" NOT NULL,
    session text COLLATE "C" NOT NULL,
    UNIQUE (tenant, session)
);

-- A session's record; `active` (status not idle) and `identity` (its
-- owner's id) are copied out of it for `unfinished` and
-- `sessions_of_identity`. The record is rewritten at every step: room
-- left in each page lets PostgreSQL update it in place (HOT), touching no
-- index.
CREATE TABLE sessions (
    sid      int8 PRIMARY KEY,
    tenant   text COLLATE "C" NOT NULL,
    id       text COLLATE "C" NOT NULL,
    active   boolean NOT NULL,
    identity text COLLATE "C",
    record   bytea NOT NULL,
    UNIQUE (tenant, id)
) WITH (fillfactor = 70);
CREATE INDEX sessions_active ON sessions (tenant, id) WHERE active;

-- A session's history, by sequence number.
CREATE TABLE messages (
    sid    int8 NOT NULL,
    seq    int8 NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (sid, seq)
);
CREATE TABLE steps (
    sid    int8 NOT NULL,
    seq    int8 NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (sid, seq)
) WITH (fillfactor = 80);
CREATE TABLE events (
    sid    int8 NOT NULL,
    seq    int8 NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (sid, seq)
);

-- Calls in flight and turns, by id.
CREATE TABLE calls (
    sid     int8 NOT NULL,
    call_id text COLLATE "C" NOT NULL,
    record  bytea NOT NULL,
    PRIMARY KEY (sid, call_id)
) WITH (fillfactor = 80);
CREATE TABLE turns (
    sid     int8 NOT NULL,
    turn_id text COLLATE "C" NOT NULL,
    record  bytea NOT NULL,
    PRIMARY KEY (sid, turn_id)
) WITH (fillfactor = 80);

-- What other sessions sent a session; numbers from one sequence, so they
-- increase across the store and are never reused.
CREATE SEQUENCE inbox_seq;
CREATE TABLE inbox (
    sid  int8 NOT NULL,
    seq  int8 NOT NULL,
    item bytea NOT NULL,
    PRIMARY KEY (sid, seq)
);

-- Per tenant.
CREATE TABLE agents (
    tenant   text COLLATE "C" NOT NULL,
    agent_id text COLLATE "C" NOT NULL,
    record   bytea NOT NULL,
    PRIMARY KEY (tenant, agent_id)
);
CREATE TABLE api_keys (
    tenant text COLLATE "C" NOT NULL,
    hash   text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (tenant, hash)
);
CREATE TABLE tenants (
    tenant text COLLATE "C" PRIMARY KEY,
    record bytea NOT NULL
);

-- Answers to requests forwarded between nodes; `stored` lets the nodes
-- delete those nobody read within an hour.
CREATE TABLE replies (
    id     text COLLATE "C" PRIMARY KEY,
    reply  bytea NOT NULL,
    stored timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX replies_stored ON replies (stored);

-- Component bytes by digest, for every node.
CREATE TABLE blobs (
    digest text COLLATE "C" PRIMARY KEY,
    bytes  bytea NOT NULL
);

-- Nodes and their heartbeats: a node is live while `expires` (its last
-- heartbeat plus its lease, by the database's clock) is in the future.
CREATE TABLE nodes (
    name    text COLLATE "C" PRIMARY KEY,
    expires timestamptz NOT NULL
);

-- Session leases: `node` holds the lease while it is live; NULL once
-- released. `token` is the fencing token of the last grant, from one
-- sequence, so it is higher than every token granted before. Rows are
-- never deleted, so a fenced commit always finds the row it must lock.
CREATE SEQUENCE lease_tokens;
CREATE TABLE leases (
    tenant  text COLLATE "C" NOT NULL,
    session text COLLATE "C" NOT NULL,
    node    text COLLATE "C",
    token   int8 NOT NULL,
    PRIMARY KEY (tenant, session)
);
CREATE INDEX leases_node ON leases (node);
