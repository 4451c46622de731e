#include "train/data.h"

#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace dynatrain::train {

namespace {

// Public-domain texts: Lincoln's Gettysburg Address (1863), the opening of Dickens' "A Tale of
// Two Cities" (1859), of Austen's "Pride and Prejudice" (1813) and of Carroll's "Alice's
// Adventures in Wonderland" (1865).
constexpr const char* kText =
    R"TEXT(Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived in Liberty, and dedicated to the proposition that all men are created equal.
Now we are engaged in a great civil war, testing whether that nation, or any nation so conceived and so dedicated, can long endure. We are met on a great battle-field of that war. We have come to dedicate a portion of that field, as a final resting place for those who here gave their lives that that nation might live. It is altogether fitting and proper that we should do this.
But, in a larger sense, we can not dedicate -- we can not consecrate -- we can not hallow -- this ground. The brave men, living and dead, who struggled here, have consecrated it, far above our poor power to add or detract. The world will little note, nor long remember what we say here, but it can never forget what they did here. It is for us the living, rather, to be dedicated here to the unfinished work which they who fought here have thus far so nobly advanced. It is rather for us to be here dedicated to the great task remaining before us -- that from these honored dead we take increased devotion to that cause for which they gave the last full measure of devotion -- that we here highly resolve that these dead shall not have died in vain -- that this nation, under God, shall have a new birth of freedom -- and that government of the people, by the people, for the people, shall not perish from the earth.

It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the other way -- in short, the period was so far like the present period, that some of its noisiest authorities insisted on its being received, for good or for evil, in the superlative degree of comparison only.
There were a king with a large jaw and a queen with a plain face, on the throne of England; there were a king with a large jaw and a queen with a fair face, on the throne of France. In both countries it was clearer than crystal to the lords of the State preserves of loaves and fishes, that things in general were settled for ever.

It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.
However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered the rightful property of some one or other of their daughters.
"My dear Mr. Bennet," said his lady to him one day, "have you heard that Netherfield Park is let at last?"
Mr. Bennet replied that he had not.
"But it is," returned she; "for Mrs. Long has just been here, and she told me all about it."
Mr. Bennet made no answer.
"Do you not want to know who has taken it?" cried his wife impatiently.
"You want to tell me, and I have no objection to hearing it."
This was invitation enough.

Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do: once or twice she had peeped into the book her sister was reading, but it had no pictures or conversations in it, "and what is the use of a book," thought Alice "without pictures or conversations?"
So she was considering in her own mind (as well as she could, for the hot day made her feel very sleepy and stupid), whether the pleasure of making a daisy-chain would be worth the trouble of getting up and picking the daisies, when suddenly a White Rabbit with pink eyes ran close by her.
There was nothing so very remarkable in that; nor did Alice think it so very much out of the way to hear the Rabbit say to itself, "Oh dear! Oh dear! I shall be late!" (when she thought it over afterwards, it occurred to her that she ought to have wondered at this, but at the time it all seemed quite natural); but when the Rabbit actually took a watch out of its waistcoat-pocket, and looked at it, and then hurried on, Alice started to her feet, for it flashed across her mind that she had never before seen a rabbit with either a waistcoat-pocket, or a watch to take out of it, and burning with curiosity, she ran across the field after it, and fortunately was just in time to see it pop down a large rabbit-hole under the hedge.
In another moment down went Alice after it, never once considering how in the world she was to get out again.
The rabbit-hole went straight on like a tunnel for some way, and then dipped suddenly down, so suddenly that Alice had not a moment to think about stopping herself before she found herself falling down a very deep well.
Either the well was very deep, or she fell very slowly, for she had plenty of time as she went down to look about her and to wonder what was going to happen next. First, she tried to look down and make out what she was coming to, but it was too dark to see anything; then she looked at the sides of the well, and noticed that they were filled with cupboards and book-shelves; here and there she saw maps and pictures hung upon pegs.
)TEXT";

}  // namespace

const std::string& embedded_text() {
  static const std::string text(kText);
  return text;
}

namespace {

const char* file_type_name(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::directory: return "a directory";
    case std::filesystem::file_type::fifo: return "a FIFO";
    case std::filesystem::file_type::character: return "a character device";
    case std::filesystem::file_type::block: return "a block device";
    case std::filesystem::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

}  // namespace

std::string read_text_file(const std::string& path) {
  // Only a regular file of bounded size: a FIFO would block the open and /dev/zero never ends.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) DT_INPUT_ERROR("cannot open data file '", path, "'");
  if (!std::filesystem::is_regular_file(status))
    DT_INPUT_ERROR("data file '", path, "' is ", file_type_name(status.type()), "; give a regular text file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxTextFileBytes)
    DT_INPUT_ERROR("data file '", path, "' has ", size, " bytes; every rank holds it whole, at most ",
                   kMaxTextFileBytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) DT_INPUT_ERROR("cannot open data file '", path, "'");
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  text.resize(static_cast<std::size_t>(in.gcount()));  // a file that shrank since the stat
  if (text.size() < 2) DT_INPUT_ERROR("data file '", path, "' has ", text.size(), " bytes; need at least 2");
  return text;
}

std::uint64_t mix64(std::uint64_t x) {  // SplitMix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void sample_windows(const std::string& text, const DataCursor& cursor, std::int64_t first, std::int64_t count,
                    std::int64_t seq, std::vector<std::int64_t>& tokens, std::vector<std::int64_t>& targets) {
  const auto len = static_cast<std::int64_t>(text.size());
  if (len < seq + 2) DT_INPUT_ERROR("training text has ", len, " bytes; --seq ", seq, " needs at least ", seq + 2);
  tokens.resize(count * seq);
  targets.resize(count * seq);
  const auto span = static_cast<std::uint64_t>(len - seq - 1);
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint64_t sample = cursor.position + static_cast<std::uint64_t>(first + i);
    const auto start = static_cast<std::int64_t>(mix64(cursor.seed * 0x100000001B3ull ^ sample) % span);
    for (std::int64_t j = 0; j < seq; ++j) {
      tokens[i * seq + j] = static_cast<unsigned char>(text[start + j]);
      targets[i * seq + j] = static_cast<unsigned char>(text[start + j + 1]);
    }
  }
}

}  // namespace dynatrain::train
