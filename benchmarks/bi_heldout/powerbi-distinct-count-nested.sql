-- tool: Power BI, DirectQuery: Count (Distinct) of person_id by department
-- chart: bar chart
-- keys: 1
-- why: COUNT(DISTINCT(unit)) with the parenthesised argument inside the nested form
-- expect: answered
select "_"."department", "_"."a0"
from 
(
    select "rows"."department" as "department",
        count(distinct("rows"."person_id")) as "a0"
    from 
    (
        select "_"."department", "_"."person_id"
        from "public"."visits" "_"
    ) "rows"
    group by "department"
) "_"
where not "_"."a0" is null
limit 1000001
