-- tool: analyst, Superset SQL Lab
-- chart: outliers
-- why: raw rows of expensive visits: must be refused
-- expect: refused 42501
SELECT visited_at, department, cost FROM visits WHERE cost > 30000
