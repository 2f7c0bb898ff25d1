"""The prompts of LifelongAgentBench's `db_bench` as MemRL's LLB runner sends them (MemTensor/MemRL at 7c3beba:
`memrl/lifelongbench_eval/prompts.py`, `memory_context.py`, `task_wrappers.py`, and the benchmark's
`src/factories/chat_history_item/offline/task_requirement.py`), word for word."""

from __future__ import annotations

SYSTEM_PROMPT = """You are an execution-focused AI agent solving database and operating-system tasks.

You may receive a [Retrieved Memory Context] block with past experiences from similar problems.
These are **references for learning**, not guaranteed solutions:
- [MEMORY TYPE] SUCCESS_PROCEDURE: A successful approach from a similar task—learn the pattern.
- [MEMORY TYPE] FAILURE_REFLECTION: A failed attempt with lessons—avoid similar mistakes.

Use the memories as inspiration, but always analyze your current task independently and
adapt your approach based on its specific requirements."""
"""The runner's system prompt (memrl/lifelongbench_eval/prompts.py:10-20)."""
OUTPUT_FORMAT = """STRICT OUTPUT FORMAT (LLB-DB, do not violate):
1) After your reasoning, include exactly ONE action line:
   - Action: Operation
   - Action: Answer
2) If Action: Operation, put exactly ONE SQL statement in the FIRST fenced code block using ```sql, on a single line. Do not add any extra text after that block.
3) If Action: Answer, include `Final Answer: ...` on the next line and do not add extra text after that."""  # noqa: E501
"""The runner's closing format block for database tasks (prompts.py:23-30), always the system prompt's last part."""
MEMORY_HEADING = "[Retrieved Memory Context]"
"""The heading the runner puts over retrieved memories (memrl/lifelongbench_eval/memory_context.py:40)."""
INSTRUCTION = """I will ask you a question, then you should help me operate a MySQL database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose one of the two actions: Operation or Answer.

To do operation, the format should be like this:
Action: Operation
```sql
SELECT * FROM table WHERE condition;
```
You MUST put SQL in markdown format without any other comments. Your SQL should be in one line.
I will use "Action: Operation" literally to match your SQL.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If the SQL is not executed successfully, the response will be the error message.
Otherwise, the response will be the raw MySQL response.
For SELECT queries, the response will be the result of the query, such as [(1, 'John Doe', 'HR'), (2, 'Jane Smith', 'IT'), ...], where each tuple represents a row and the elements are the values of the columns in the row.
For SQL such as INSERT, UPDATE, and DELETE, the response will be an empty list [] indicating that the SQL was executed successfully.

If you have obtain the answer by interacting with the database, and you MUST commit your final answer using the format like this:
Action: Answer
Final Answer: [(1, 'John Doe', 'HR'), (2, 'Jane Smith', 'IT'), ...]
DO NOT write this pattern unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If the question is about querying the database, then after done operation, your answer field should be the result of the query.
We note that the column names will not be displayed in the result, and you need to ensure both the orders of the columns and rows are correct.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
Once you commit your answer or the number of rounds reaches 3, the task will be finished and the system will judge whether you pass the task or not.

Now, I will give you the question that you need to solve."""  # noqa: E501
"""The benchmark's instruction turn for db_bench (src/factories/chat_history_item/offline/task_requirement.py:7-33)
with the suffix the runner's standard prompts add (memrl/lifelongbench_eval/task_wrappers.py:66-69); the agent's
answer to it is "OK." (construct.py:19). Its "3 rounds" is the benchmark's text; the runner allows `MAX_ROUND`."""
