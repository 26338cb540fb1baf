-- tool: dbplyr, head(tbl(con, "visits")) (printing the lazy table)
-- chart: data frame (raw)
-- why: raw rows: must be refused
-- expect: refused 42501
SELECT *
FROM "visits"
LIMIT 6
