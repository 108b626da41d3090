"""Grade a class: every student's exercises, checked where the student's code cannot reach the checker.

``python3 course.py grade PATH... [--out DIR] [--cases FILE]`` (or ``python -m course_lib.grading``,
whose command line is ``__main__.py``) grades student copies of the course notebooks with
:mod:`course_lib.grading.grader`. How one notebook is graded, and where each part lives:

1. **Which notebook is it, which cells matter?** (:mod:`course_lib.grading.submissions`) Found by its
   cells: the exercises its ``check("name", fn)`` calls name, else the markdown cells it shares with a
   course notebook. File names do not matter. Only each exercise's cell and the earlier cells that bind
   or change a name it reads will run (``--every-cell``: all of them), so training, plots and explorers
   cannot fail or hang; the statements that call ``check(...)`` are left out.
2. **The answers come first.** (:mod:`course_lib.grading.scoring`) Before any student code runs, this
   process builds every case of every exercise (the visible ones of ``course_lib/exercises/`` and the hidden ones
   of ``--cases FILE``, by default the shipped demo set that students can read) and computes the
   expected answers with the references, or the solutions of the instructors' key.
3. **The student's code runs where nothing escapes.** (:mod:`course_lib.grading.sandbox`,
   :mod:`course_lib.grading.student_process`) A fresh Python process under a supervisor of its own (on
   Linux, in its own user, PID and mount namespaces) runs those cells with the CI training budget, a
   memory and a file-size limit, output discarded and writes outside its folder refused; after an
   exercise's cell it calls the function on the cases' *inputs* and sends back plain tensors and values.
4. **This process compares** (:mod:`course_lib.grading.scoring`) with the checker's own comparison, so a
   student who redefines ``check``, patches ``course_lib`` or torch, or prints "passed" changes nothing.
5. **Each result is written when it is known** (:mod:`course_lib.grading.gradebook`): a stopped run, run
   again, grades only the notebooks still missing (``--regrade`` starts over).

A bad notebook costs one student: a cell that raises is noted and the next cells still run; a cell or
an exercise that runs past ``--timeout`` is interrupted (its exercise is ``timeout``); a process that
dies, or is killed by its own code, is charged to the cell or exercise it was running, and a new one
replays the notebook without that cell. Several notebooks are graded in parallel (``--jobs``).

**The instructors' key** (:mod:`course_lib.grading.keys`) holds each notebook's in ``keys/chNN.py``: every
exercise's solution, hidden cases (the demo set) and typical mistakes; ``keys/core.py`` the registers
they fill, ``keys/__main__.py`` ``course.py solutions``. A students' copy leaves the folder out.

Nothing is imported here: the sandbox's supervisor and the student's process start as
``python -m course_lib.grading.<module>`` and import only what they use.
"""
