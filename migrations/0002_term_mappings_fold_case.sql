-- Term mappings match ASCII letters case-insensitively (service.ApplyTermMappings),
-- so "VPN" and "vpn" enabled together would compete for the same text: make
-- the source term unique among enabled mappings ignoring case.
DROP INDEX term_mappings_source_enabled;
CREATE UNIQUE INDEX term_mappings_source_enabled ON term_mappings (lower(source_term)) WHERE enabled;
