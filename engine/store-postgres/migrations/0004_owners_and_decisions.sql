-- Schema 4: sessions by owner, and decisions by agent version.
--
-- Listing an owner's sessions reads the index of its owner's rows only,
-- however many sessions the tenant has. A session's owner never changes,
-- so rewriting its record leaves the index untouched and stays HOT.
CREATE INDEX sessions_owner ON sessions (tenant, identity, id) WHERE identity IS NOT NULL;

-- How many decisions each version of each agent made in its tenant's
-- sessions: added to in the commit that applies the decisions, so reading
-- an agent's counts reads a row per version, not every session. Filled
-- here from the counts the session records keep. PostgreSQL's JSON
-- functions refuse the escape of NUL, which a record's strings may hold:
-- it is read as another escape, in strings this reads nothing of.
CREATE TABLE decisions (
    tenant    text COLLATE "C" NOT NULL,
    agent_id  text COLLATE "C" NOT NULL,
    version   text COLLATE "C" NOT NULL,
    decisions int8 NOT NULL,
    PRIMARY KEY (tenant, agent_id, version)
);
INSERT INTO decisions (tenant, agent_id, version, decisions)
SELECT s.tenant, r.record ->> 'agent_id', v.key, LEAST(sum(v.value::numeric), 9223372036854775807)::int8
FROM sessions s
CROSS JOIN LATERAL (SELECT replace(convert_from(s.record, 'UTF8'), '\u0000', '\u0001')::json AS record) r
CROSS JOIN LATERAL json_each_text(COALESCE(r.record -> 'versions', '{}'::json)) v
GROUP BY 1, 2, 3;
