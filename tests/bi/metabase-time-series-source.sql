-- tool: Metabase, query builder on PostgreSQL, recent versions: the temporal breakout is computed in
--   an inner "source" query and grouped outside (as in Metabase's docs, query-builder/expressions/
--   offset.md, which shows this shape for "Count by Created At: Month")
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT "source"."visited_at" AS "visited_at", COUNT(*) AS "count" FROM (SELECT DATE_TRUNC('month', "public"."visits"."visited_at") AS "visited_at" FROM "public"."visits") AS "source" GROUP BY "source"."visited_at" ORDER BY "source"."visited_at" ASC
