-- tool: Tableau, creating an extract of the visits table
-- chart: extract (raw)
-- why: every row: must be refused
-- expect: refused 42501
SELECT "visits"."cost" AS "cost", "visits"."days" AS "days", "visits"."department" AS "department", "visits"."person_id" AS "person_id", "visits"."visited_at" AS "visited_at" FROM "public"."visits" "visits"
