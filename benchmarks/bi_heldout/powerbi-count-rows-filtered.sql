-- tool: Power BI, DirectQuery: card visual, Count of person_id with a page filter age >= 18
-- chart: card
-- why: a count over a filtered ITBL subquery
-- expect: answered
select count(1) as "a0"
from 
(
    select "_"."person_id"
    from "public"."people" "_"
    where "_"."age" >= 18
) "ITBL"
