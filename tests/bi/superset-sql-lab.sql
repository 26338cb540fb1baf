-- tool: Apache Superset 6.1.0, SQL Lab: an analyst's aggregate as SQL Lab runs it (formatted,
--   with its row limit 1000 + 1 appended), copied from the executedSql of its answer
-- expect: answered
SELECT
  region,
  COUNT(*) AS n
FROM people
GROUP BY
  region
LIMIT 1001
