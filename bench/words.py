"""The vocabulary generated chats and lorebooks are made of, in every benchmark."""

WORDS = tuple(
    [
        "the",
        "river",
        "spirits",
        "whisper",
        "of",
        "old",
        "oaths",
        "beneath",
        "the",
        "silver",
        "moon",
        "while",
        "{{char}}",
        "keeps",
        "watch",
        "over",
        "{{user}}",
        "and",
        "the",
        "glade",
        "of",
        "Eldoria",
        "where",
        "shadowfangs",
        "roam",
    ]
)

# Chat files store messages with macros already filled in (only greetings keep them).
CHAT_WORDS = tuple(word for word in WORDS if "{{" not in word)
