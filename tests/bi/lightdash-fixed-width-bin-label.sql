-- tool: Lightdash, a fixed-width bin dimension with its text label
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's people.age
-- expect: answered
SELECT CONCAT(FLOOR("people".age / 10) * 10, ' - ', (FLOOR("people".age / 10) + 1) * 10 - 1) AS "people_age_bin", COUNT(DISTINCT "people".person_id) AS "people_unique_people" FROM "public"."people" AS "people" GROUP BY 1 ORDER BY "people_age_bin" LIMIT 500
