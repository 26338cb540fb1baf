-- tool: Power BI-style SQL: a distinct count of the privacy unit by region, its argument
--   in brackets
-- source: issue 33 ("COUNT(DISTINCT ("t"."person_id")) (Power BI's parenthesised unit)")
-- identifiers: the demo's people.person_id (the privacy unit) and people.region
-- expect: answered
select "_"."region", count(distinct("_"."person_id")) as "a0" from "public"."people" "_" group by "_"."region"
