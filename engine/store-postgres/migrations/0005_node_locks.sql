-- Schema 5: a node's liveness is also its connection's.
--
-- Each node holds a session-level advisory lock, (1937072755, lock_key),
-- on its heartbeat's connection, taken when it registers and again each
-- time that connection is made anew, with a new key from `node_locks`.
-- PostgreSQL releases the lock when the connection ends, which happens at
-- once when the node's process dies: the others find the lock free and
-- count the node dead without waiting for its heartbeat to expire.
-- `locked` is when the lock was taken: a lock taken before the server
-- last started was lost to the restart, not to the node's death, and
-- until the node takes a new one its heartbeat alone says whether it
-- lives. Nodes of older versions have no lock (NULL): their heartbeat
-- alone counts.
ALTER TABLE nodes ADD COLUMN lock_key int4, ADD COLUMN locked timestamptz;
CREATE SEQUENCE node_locks AS int4 CYCLE;
