-- Schema 6: tenants' MCP servers, the tool sources of their agents.
CREATE TABLE mcp_servers (
    tenant text COLLATE "C" NOT NULL,
    name   text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (tenant, name)
);
