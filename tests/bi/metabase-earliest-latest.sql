-- tool: Metabase, query builder on PostgreSQL ("Earliest of Visited At" and "Latest of Visited At",
--   one question with two metrics, shown as a table)
-- source: Metabase's MBQL aggregations :min and :max of a temporal field compile to min()/max() of the
--   schema-qualified quoted column, aliased "min" and "max" (metabase/metabase
--   src/metabase/driver/sql/query_processor.clj, the :min/:max aggregation clauses)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT min("public"."visits"."visited_at") AS "min", max("public"."visits"."visited_at") AS "max" FROM "public"."visits"
