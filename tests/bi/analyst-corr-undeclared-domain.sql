-- tool: analyst SQL (psql), a correlation with a column the rules give no domain
-- source: issue 33 (CORR needs a declared domain for both columns; refused before any debit)
-- identifiers: the demo's people.income and person_id
-- expect: refused 0A000
SELECT CORR(income, person_id) AS r FROM people
