"""A tiny SQL question set that ships in the package: three small databases and 32 questions with gold SQL.

It exists so the `sql` environment runs (and its tests pass) without downloading Spider. The databases are written
from the tables below into the cache on first use, in a folder named after a fingerprint of this data, so an edit
here builds a fresh copy. The data is hand-made so every answer is unambiguous: no ties under ORDER BY ... LIMIT,
no empty results. Hardness labels follow Spider's four levels (easy, medium, hard, extra).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ttlearn.cache import cache_root
from ttlearn.data.prepare import Question, build_question_set, load_question_set

Row = tuple[Any, ...]


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _table(name: str, columns: str, rows: list[Row]) -> list[str]:
    """CREATE TABLE name (columns) and one INSERT with every row."""
    values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
    return [f"CREATE TABLE {name} ({columns})", f"INSERT INTO {name} VALUES {values}"]


DATABASES: dict[str, list[str]] = {
    "school": [
        *_table(
            "students",
            "student_id INTEGER PRIMARY KEY, name TEXT, year INTEGER, city TEXT",
            [
                (1, "Ada", 1, "Oslo"),
                (2, "Ben", 2, "Lyon"),
                (3, "Chloe", 3, "Oslo"),
                (4, "Dev", 1, "Porto"),
                (5, "Emma", 2, "Oslo"),
                (6, "Farid", 4, "Lyon"),
                (7, "Grace", 3, "Porto"),
                (8, "Hugo", 1, "Lyon"),
            ],
        ),
        *_table(
            "courses",
            "course_id INTEGER PRIMARY KEY, title TEXT, department TEXT, credits INTEGER",
            [
                (1, "Algebra", "Math", 5),
                (2, "Databases", "CS", 6),
                (3, "Poetry", "Arts", 3),
                (4, "Statistics", "Math", 4),
                (5, "Networks", "CS", 5),
            ],
        ),
        *_table(
            "enrollments",
            "student_id INTEGER REFERENCES students(student_id), course_id INTEGER REFERENCES courses(course_id), "
            "grade INTEGER, PRIMARY KEY (student_id, course_id)",
            [
                (1, 1, 88),
                (1, 2, 92),
                (2, 1, 75),
                (2, 3, 81),
                (3, 2, 67),
                (3, 4, 90),
                (3, 5, 78),
                (4, 1, 59),
                (5, 2, 95),
                (5, 3, 72),
                (5, 4, 84),
                (6, 5, 70),
                (7, 1, 93),
                (7, 4, 66),
            ],
        ),
    ],
    "shop": [
        *_table(
            "customers",
            "customer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, joined TEXT",
            [
                (1, "Acme Corp", "France", "2021-03-04"),
                (2, "Blue Fin", "Spain", "2022-07-19"),
                (3, "Cedar Ltd", "France", "2020-11-30"),
                (4, "Delta Inc", "Germany", "2023-01-15"),
                (5, "Echo Bay", "Spain", "2021-09-09"),
                (6, "Fjord AS", "Norway", "2023-05-02"),
            ],
        ),
        *_table(
            "products",
            "product_id INTEGER PRIMARY KEY, name TEXT, category TEXT, price REAL",
            [
                (1, "Kettle", "Kitchen", 25.0),
                (2, "Toaster", "Kitchen", 40.0),
                (3, "Desk Lamp", "Office", 18.5),
                (4, "Office Chair", "Office", 120.0),
                (5, "Notebook", "Office", 3.25),
                (6, "Blender", "Kitchen", 65.0),
            ],
        ),
        *_table(
            "orders",
            "order_id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(customer_id), "
            "product_id INTEGER REFERENCES products(product_id), quantity INTEGER, order_date TEXT",
            [
                (1, 1, 1, 2, "2024-01-05"),
                (2, 1, 4, 1, "2024-01-20"),
                (3, 2, 5, 10, "2024-02-02"),
                (4, 3, 2, 1, "2024-02-14"),
                (5, 3, 6, 2, "2024-03-01"),
                (6, 4, 3, 3, "2024-03-03"),
                (7, 5, 5, 20, "2024-03-18"),
                (8, 1, 5, 5, "2024-04-02"),
                (9, 2, 1, 1, "2024-04-11"),
                (10, 4, 4, 2, "2024-04-25"),
            ],
        ),
    ],
    "library": [
        *_table(
            "authors",
            "author_id INTEGER PRIMARY KEY, name TEXT, born INTEGER, nationality TEXT",
            [
                (1, "Mira Stone", 1950, "British"),
                (2, "Tomas Vale", 1972, "Spanish"),
                (3, "Ines Park", 1985, "Korean"),
                (4, "Leo Grant", 1940, "American"),
                (5, "Nora Quist", 1990, "Swedish"),
            ],
        ),
        *_table(
            "books",
            "book_id INTEGER PRIMARY KEY, title TEXT, author_id INTEGER REFERENCES authors(author_id), year INTEGER, "
            "pages INTEGER, genre TEXT",
            [
                (1, "The Quiet Shore", 1, 1980, 320, "Novel"),
                (2, "Winter Lines", 1, 1995, 210, "Poetry"),
                (3, "Salt Roads", 2, 2001, 410, "Novel"),
                (4, "Glass Harbour", 2, 2010, 280, "Novel"),
                (5, "Small Hours", 3, 2015, 150, "Poetry"),
                (6, "Night Garden", 3, 2019, 365, "Fantasy"),
                (7, "Iron Valley", 4, 1968, 500, "History"),
                (8, "Old Maps", 4, 1975, 240, "History"),
            ],
        ),
        *_table(
            "loans",
            "loan_id INTEGER PRIMARY KEY, book_id INTEGER REFERENCES books(book_id), member TEXT, loan_date TEXT, "
            "returned INTEGER",
            [
                (1, 1, "Sam", "2024-05-01", 1),
                (2, 3, "Sam", "2024-05-10", 1),
                (3, 3, "Lena", "2024-06-02", 0),
                (4, 5, "Omar", "2024-06-15", 1),
                (5, 6, "Lena", "2024-07-01", 0),
                (6, 6, "Omar", "2024-07-20", 1),
                (7, 6, "Sam", "2024-08-05", 0),
                (8, 7, "Lena", "2024-08-09", 1),
                (9, 1, "Omar", "2024-09-12", 0),
            ],
        ),
    ],
}

_QUESTIONS: list[tuple[str, str, str, str]] = [
    # (database, hardness, question, gold SQL)
    ("school", "easy", "How many students are there?", "SELECT count(*) FROM students"),
    ("school", "easy", "List the names of the students from Oslo.", "SELECT name FROM students WHERE city = 'Oslo'"),
    (
        "school",
        "medium",
        "How many students live in each city? Give the city and the count.",
        "SELECT city, count(*) FROM students GROUP BY city",
    ),
    (
        "school",
        "medium",
        "List the titles of the Math department's courses in alphabetical order.",
        "SELECT title FROM courses WHERE department = 'Math' ORDER BY title",
    ),
    (
        "school",
        "medium",
        "What is the average grade in the course Databases?",
        "SELECT avg(e.grade) FROM enrollments AS e JOIN courses AS c ON e.course_id = c.course_id "
        "WHERE c.title = 'Databases'",
    ),
    (
        "school",
        "hard",
        "What is the name of the student with the highest grade in any course?",
        "SELECT s.name FROM students AS s JOIN enrollments AS e ON s.student_id = e.student_id "
        "ORDER BY e.grade DESC LIMIT 1",
    ),
    (
        "school",
        "hard",
        "List the names of the students who are not enrolled in any course.",
        "SELECT name FROM students WHERE student_id NOT IN (SELECT student_id FROM enrollments)",
    ),
    (
        "school",
        "medium",
        "For each department, give the total credits of its courses, from most to fewest.",
        "SELECT department, sum(credits) FROM courses GROUP BY department ORDER BY sum(credits) DESC",
    ),
    (
        "school",
        "hard",
        "What are the names of the students enrolled in at least three courses?",
        "SELECT s.name FROM students AS s JOIN enrollments AS e ON s.student_id = e.student_id "
        "GROUP BY s.student_id HAVING count(*) >= 3",
    ),
    (
        "school",
        "extra",
        "Which course has the most students? Give its title and its number of students.",
        "SELECT c.title, count(*) FROM courses AS c JOIN enrollments AS e ON c.course_id = e.course_id "
        "GROUP BY c.course_id ORDER BY count(*) DESC LIMIT 1",
    ),
    ("shop", "easy", "How many products cost more than 20?", "SELECT count(*) FROM products WHERE price > 20"),
    (
        "shop",
        "easy",
        "List every product's name and price, from the most expensive to the cheapest.",
        "SELECT name, price FROM products ORDER BY price DESC",
    ),
    (
        "shop",
        "medium",
        "What is the average price of the products in each category? Give the category and average.",
        "SELECT category, avg(price) FROM products GROUP BY category",
    ),
    (
        "shop",
        "medium",
        "What are the names of the customers from France or Spain?",
        "SELECT name FROM customers WHERE country IN ('France', 'Spain')",
    ),
    (
        "shop",
        "hard",
        "How many orders did each customer place? Give every customer's name, also those without orders.",
        "SELECT c.name, count(o.order_id) FROM customers AS c LEFT JOIN orders AS o ON c.customer_id = o.customer_id "
        "GROUP BY c.customer_id",
    ),
    (
        "shop",
        "hard",
        "What is the total revenue of all orders (price times quantity)?",
        "SELECT sum(p.price * o.quantity) FROM orders AS o JOIN products AS p ON o.product_id = p.product_id",
    ),
    (
        "shop",
        "extra",
        "Which customer spent the most money in total? Give the name.",
        "SELECT c.name FROM customers AS c JOIN orders AS o ON c.customer_id = o.customer_id "
        "JOIN products AS p ON o.product_id = p.product_id GROUP BY c.customer_id "
        "ORDER BY sum(p.price * o.quantity) DESC LIMIT 1",
    ),
    (
        "shop",
        "medium",
        "Which customers never placed an order? Give their names.",
        "SELECT name FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM orders)",
    ),
    (
        "shop",
        "easy",
        "How many orders were placed in March 2024?",
        "SELECT count(*) FROM orders WHERE order_date LIKE '2024-03-%'",
    ),
    (
        "shop",
        "extra",
        "List, in alphabetical order and without duplicates, the products ordered by French customers.",
        "SELECT DISTINCT p.name FROM products AS p JOIN orders AS o ON p.product_id = o.product_id "
        "JOIN customers AS c ON o.customer_id = c.customer_id WHERE c.country = 'France' ORDER BY p.name",
    ),
    (
        "shop",
        "hard",
        "Which product categories sold more than 10 items in total? Give the category and the quantity.",
        "SELECT p.category, sum(o.quantity) FROM products AS p JOIN orders AS o ON p.product_id = o.product_id "
        "GROUP BY p.category HAVING sum(o.quantity) > 10",
    ),
    ("library", "easy", "How many books are in the library?", "SELECT count(*) FROM books"),
    (
        "library",
        "easy",
        "What are the titles of the books published after 2000?",
        "SELECT title FROM books WHERE year > 2000",
    ),
    (
        "library",
        "medium",
        "How many books are there in each genre? Give the genre and the count.",
        "SELECT genre, count(*) FROM books GROUP BY genre",
    ),
    (
        "library",
        "medium",
        "What is the title of the book with the most pages?",
        "SELECT title FROM books ORDER BY pages DESC LIMIT 1",
    ),
    (
        "library",
        "medium",
        "For each author born before 1960, give the name and the number of books they wrote.",
        "SELECT a.name, count(*) FROM authors AS a JOIN books AS b ON a.author_id = b.author_id WHERE a.born < 1960 "
        "GROUP BY a.author_id",
    ),
    (
        "library",
        "easy",
        "Which members have a book they have not returned yet? Name each member once.",
        "SELECT DISTINCT member FROM loans WHERE returned = 0",
    ),
    (
        "library",
        "hard",
        "What are the titles of the books that were never borrowed?",
        "SELECT title FROM books WHERE book_id NOT IN (SELECT book_id FROM loans)",
    ),
    (
        "library",
        "extra",
        "Whose books were borrowed most often? Give the author's name and the number of loans.",
        "SELECT a.name, count(*) FROM authors AS a JOIN books AS b ON a.author_id = b.author_id "
        "JOIN loans AS l ON b.book_id = l.book_id GROUP BY a.author_id ORDER BY count(*) DESC LIMIT 1",
    ),
    (
        "library",
        "easy",
        "What is the average number of pages of the Novel books?",
        "SELECT avg(pages) FROM books WHERE genre = 'Novel'",
    ),
    (
        "library",
        "extra",
        "For each genre, give the genre, the title and the year of its oldest book, oldest first.",
        "SELECT genre, title, min(year) FROM books GROUP BY genre ORDER BY min(year)",
    ),
    (
        "library",
        "extra",
        "What are the names of the authors who wrote both Novel and Poetry books?",
        "SELECT a.name FROM authors AS a JOIN books AS b ON a.author_id = b.author_id WHERE b.genre = 'Novel' "
        "INTERSECT SELECT a.name FROM authors AS a JOIN books AS b ON a.author_id = b.author_id "
        "WHERE b.genre = 'Poetry'",
    ),
]
QUESTIONS = [{"db": db, "question": text, "gold": gold, "hardness": hard} for db, hard, text, gold in _QUESTIONS]


def mini_dir() -> Path:
    """$TTLEARN_CACHE/data/sql-mini-<fingerprint of DATABASES and QUESTIONS>."""
    fingerprint = hashlib.sha256(json.dumps([DATABASES, QUESTIONS]).encode()).hexdigest()[:12]
    return cache_root() / "data" / f"sql-mini-{fingerprint}"


def load_mini() -> tuple[dict[str, Any], list[Question]]:
    """The mini set, written into the cache first if it is missing or no longer matches its manifest (it is
    regenerated from the code above, so there is nothing to download)."""
    directory = mini_dir()
    try:
        return load_question_set(directory)
    except (FileNotFoundError, ValueError):
        build_question_set(directory, DATABASES, QUESTIONS, {"data": "ttlearn's mini SQL set"})
        return load_question_set(directory)
