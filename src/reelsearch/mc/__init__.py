"""The 5-choice multiple-choice test of Torabi et al. 2016: activity phrases, question builder, files, accuracy.

Light imports only here (the spaCy pipeline loads on first use; torch only when a model scores).
"""

from reelsearch.mc.build import BuildResult, build_questions
from reelsearch.mc.mcfile import N_CHOICES, Question, read_mc_file, write_mc_file
from reelsearch.mc.phrases import ActivityTagger, Tagged
from reelsearch.mc.scoring import answer_question, mc_accuracy

__all__ = [
    "N_CHOICES",
    "ActivityTagger",
    "BuildResult",
    "Question",
    "Tagged",
    "answer_question",
    "build_questions",
    "mc_accuracy",
    "read_mc_file",
    "write_mc_file",
]
