-- tool: Tableau (PostgreSQL connector), COUNTD([Person Id]) of an integer field
-- source: the lead's BI probe of 2026-11-29 ("COUNT(DISTINCT CAST(… AS BIGINT))")
-- identifiers: the demo's visits.person_id
-- expect: answered
SELECT COUNT(DISTINCT CAST("visits"."person_id" AS BIGINT)) AS "ctd:person_id:ok" FROM "public"."visits" "visits"
