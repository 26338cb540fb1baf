-- tool: analyst, psql
-- chart: write
-- why: a write: must be refused
-- expect: refused 25006
DELETE FROM visits WHERE cost > 50000
