"""English word counts for bench/tokenizer.py, written by scripts/make_bench_corpus.py
(Python 3.11.7); regenerate rather than edit.

Each holds pairs `word count`: SPACED for the word after a space (' word'), BARE for it alone.
"""

SPACED = """
the 20944 a 9989 is 8313 of 8230 to 8128 and 5617 in 4463 for 4091 be 3468 or 3405 that 2858 as 2398
an 2384 with 2371 if 2345 are 2232 by 2148 it 2026 this 1981 not 1900 from 1615 object 1552 file
1368 class 1355 on 1298 The 1276 will 1252 can 1184 string 1172 If 1162 value 1118 list 1061 all
1055 function 1029 which 1027 method 1014 used 1002 any 979 you 957 name 933 return 903 may 900 type
789 module 750 other 725 given 720 one 715 when 715 argument 693 use 686 number 682 must 669 set 664
at 662 None 654 instance 653 no 653 line 651 code 642 should 641 License 607 have 606 data 589
default 585 version 562 only 541 its 540 new 540 has 533 arguments 529 text 523 This 521 called 508
command 508 values 492 but 485 Python 483 same 482 specified 478 exception 462 then 461 using 461
current 459 also 457 bytes 456 work 444 objects 435 returns 424 A 418 widget 417 first 416 returned
412 True 406 turtle 402 under 386 path 379 such 371 call 364 copy 364 each 364 message 361 than 357
into 354 time 351 dictionary 350 does 350 names 348 attribute 346 true 343 self 341 read 337 files
335 header 334 was 332 defined 331 methods 331 tuple 329 statement 328 either 327 source 327 so 326
sequence 323 more 322 ExtendedContext 317 b 315 key 311 event 307 do 303 two 303 section 301 get 300
result 295 You 294 server 293 there 293 option 291 user 287 c 281 item 281 Decimal 278 lines 277
they 276 example 273 following 272 types 268 For 267 format 265 case 261 strings 261 mode 259 non
259 where 259 passed 257 x 257 up 256 It 255 error 253 empty 252 form 251 your 251 directory 250
context 249 raised 247 characters 246 integer 242 import 238 order 238 otherwise 238 int 237 single
237 we 237 functions 236 raise 236 base 235 block 235 some 233 terms 233 optional 232 after 231
information 231 these 230 implementation 229 RFC 228 address 228 program 227 attributes 225
available 225 end 224 provided 224 options 223 parameter 223 been 222 character 222 means 218
pattern 216 found 214 input 214 before 212 classes 211 created 211 named 211 frame 208 their 208
without 208 False 206 expression 206 last 206 output 205 part 205 variable 205 window 204 library
201 whether 200 encoding 199 keyword 197 support 196 y 196 str 195 size 194 socket 193 most 192
Library 191 create 191 instead 191 containing 189 between 188 open 188 items 186 built 185 stream
183 make 181 print 181 process 181 standard 181 license 177 until 177 add 176 those 176 position 175
filename 173 being 172 sys 172 dict 171 Document 170 both 170 index 170 variables 170 keys 166
always 161 thread 161 loop 160 connection 158 contains 158 possible 158 them 158 uses 158 software
157 In 156 handler 156 IPv 155 GNU 154 based 154 except 154 target 154 through 154 operation 153 def
152 defaults 152 original 152 response 152 next 151 e 150 zero 150 When 149 added 149 Return 148
equivalent 148 already 147 another 147 system 147 search 146 change 145 cannot 144 state 144 like
143 special 143 start 143 different 142 namespace 142 run 142 within 142 calls 141 match 141
subclass 141 C 140 Public 139 way 139 false 138 request 138 free 137 parent 137 range 137 point 136
rights 136 bound 135 access 133 include 133 local 133 present 133 corresponding 132 length 132
notice 132 package 132 buffer 131 contain 130 executed 130 level 129 instances 128 made 128 over 128
tree 128 binary 127 display 127 write 127 distribute 126 operations 126 General 125 copyright 125
protocol 125 would 124 copies 123 entry 123 left 123 representation 123 parameters 122 interface 121
mapping 121 above 119 doesn 119 flag 119 numbers 119 clause 118 definition 118 how 118 matches 118
need 118 right 118 about 117 custom 117 distribution 117 multiple 117 dialog 116 Code 115 help 115
implement 115 syntax 115 elements 114 just 114 screen 114 See 113 node 113 commands 112 required 112
Source 111 errors 111 matching 111 root 111 s 111 Note 110 changes 110 documentation 110 provides
110 reference 110 width 110 THE 109 details 109 extension 109 itself 109 sequences 109 written 109
close 108 configuration 108 f 108 generated 108 suite 108 An 107 modules 107 port 107 OR 106
descriptor 106 done 106 modify 106 needed 106 valid 106 were 106 Version 105 headers 105 raises 105
sets 105 d 104 future 104 including 104 stack 104 Program 103 conditions 103 modified 103 os 103
versions 103 OF 102 To 102 callback 102 considered 102 execution 102 see 102 allow 101 encoded 101
field 101 handle 101 operand 101 works 101 Software 100 environment 100 runtime 100 supplied 100
want 100 Codec 99 HTTP 99 callable 99 calling 99 equal 99 pass 99 additional 98 appropriate 98
directly 98 global 98 occurs 98 covered 97 existing 97 least 97 child 96 once 96 automatically 95 i
95 n 95 underlying 95 even 94 Otherwise 93 contents 93 coroutine 93 exist 93 out 93 while 93 button
92 logging 92 unless 92 Work 91 assignment 91 below 91 currently 91 define 91 document 91 float 91
manager 91 selection 91 timeout 91 whose 91 constructor 90 control 90 lists 90 particular 90 place
90 provide 90 try 90 complete 89 Contributor 88 according 88 executable 88 negative 88 shared 88
specifies 88 via 88 apply 87 interpreter 87 pair 87 selected 87 Free 86 application 86 count 86
directories 86 find 86 supports 86 title 86 ValueError 85 full 85 internal 85 iterator 85 received
85 what 85 archive 84 args 84 behavior 84 common 84 debugger 84 font 84 long 84 member 84 numeric 84
prefix 84 second 84 whitespace 84 Sections 83 because 83 element 83 iterable 83 queue 83 record 83
removed 83 allowed 82 color 82 override 82 simple 82 byte 81 host 81 omitted 81 parser 81 positional
81 previous 81 reading 81 supported 81 top 81 useful 81 writing 81 Character 80 digits 80 lock 80
normal 80 specific 80 breakpoint 79 menu 79 running 79 table 79 Mapping 78 XML 78 identifier 78
implemented 78 These 77 URL 77 check 77 else 77 generic 77 included 77 logger 77 public 77 changed
76 comparison 76 exceptions 76 group 76 mailbox 76 results 76 specify 76 theme 76 three 76 times 76
converted 75 necessary 75 newline 75 patent 75 scope 75 body 74 network 74 references 74 since 74
traceback 74 well 74 ASCII 73 Turtle 73 allows 73 associated 73 closed 73 config 73 date 73
described 73 don 73 events 73 intended 73 side 73 similar 73 space 73 entries 72 exists 72
expressions 72 generator 72 relative 72 JSON 71 back 71 could 71 every 71 notices 71 parse 71 Tk 70
arbitrary 70 boolean 70 client 70 fields 70 imported 70 rather 70 setting 70 tuples 70 Covered 69
Foundation 69 content 69 image 69 pairs 69 patterns 69 rules 69 stop 69 stored 69 Use 68 abstract 68
certain 68 exit 68 formatted 68 integers 68 members 68 old 68 quoted 68 raw 68 regular 68
representing 68 shall 68 API 67 All 67 HTML 67 I 67 canvas 67 subject 67 Called 66 formatting 66
ignored 66 link 66 sign 66 Windows 65 X 65 email 65 gencodec 65 invalid 65 language 65 locale 65
subprocess 65 suitable 65 widgets 65 Copyright 64 P 64 assigned 64 decimal 64 defines 64 treated 64
INDEX 63 PEP 63 charset 63 cursor 63 entire 63 explicitly 63 here 63 later 63 main 63 style 63
annotations 62 arg 62 builtin 62 exactly 62 indicates 62 never 62 words 62 EOF 61 Each 61 IP 61
during 61 hash 61 literal 61 log 61 own 61 replace 61 represents 61 still 61 various 61 AND 60 Unix
60 compiler 60 resulting 60 takes 60 TO 59 binding 59 cause 59 column 59 etc 59 frames 59 less 59
limit 59 literals 59 master 59 mean 59 nodes 59 positive 59 script 59 trace 59 warranty 59 OPTIONS
58 T 58 cache 58 caller 58 cases 58 handling 58 indicating 58 leading 58 messages 58 mouse 58 test
58 token 58 ANY 57 assert 57 immediately 57 invoked 57 nested 57 opened 57 operator 57 per 57
resource 57 usage 57 view 57 However 56 container 56 decorator 56 evaluated 56 platform 56 returning
56 tab 56 tag 56 third 56 trailing 56 transport 56 anything 55 cookies 55 creation 55 decode 55
determined 55 gives 55 includes 55 maximum 55 memory 55 overridden 55 parsing 55 requests 55
separate 55 together 55 too 55 total 55 whole 55 wrapper 55 Any 54 Corresponding 54 IDLE 54 Modified
54 Text 54 coordinates 54 deprecated 54 inside 54 modifications 54 shell 54 statements 54 yield 54
Section 53 Unicode 53 actual 53 against 53 applies 53 compression 53 delete 53 handlers 53 height 53
normally 53 obj 53 precision 53 random 53 spaces 53 wrapped 53 By 52 addition 52 creating 52 effect
52 follow 52 io 52 isn 52 location 52 mutable 52 page 52 sections 52 sent 52 threads 52 year 52
Invariant 51 Returns 51 actually 51 give 51 initial 51 nothing 51 pointer 51 policy 51 separator 51
subclasses 51 ABC 50 KeyError 50 absolute 50 accept 50 around 50 compiled 50 exponent 50 handled 50
implements 50 makes 50 many 50 registered 50 represent 50 static 50 word 50 MIME 49 That 49 active
49 complex 49 convey 49 copying 49 outside 49 printed 49 specification 49 typing 49 Texts 48
TurtleScreen 48 blocks 48 compare 48 derived 48 further 48 known 48 meaning 48 permission 48 recent
48 remove 48 users 48 Content 47 accepted 47 needs 47 published 47 TypeError 46 UUID 46 compile 46
fails 46 modification 46 programs 46 property 46 refers 46 sorted 46 sure 46 t 46 v 46 action 45
adds 45 attempt 45 convert 45 database 45 datetime 45 definitions 45 description 45 detail 45 foo 45
insert 45 interactive 45 legal 45 libraries 45 making 45 offer 45 plus 45 points 45 take 45 task 45
IS 44 SSL 44 appear 44 beginning 44 blank 44 chunk 44 descriptors 44 expected 44 followed 44 formats
44 globals 44 granted 44 listed 44 load 44 mark 44 proxy 44 re 44 sample 44 send 44 stdout 44 yields
44 Tcl 43 WARRANTY 43 avoid 43 condition 43 debugging 43 depends 43 difference 43 extra 43 helper 43
material 43 metaclass 43 pathname 43 paths 43 requires 43 seconds 43 signal 43 slice 43 starting 43
status 43 virtual 43 who 43 Fraction 42 NOT 42 applicable 42 clear 42 compatibility 42 continue 42
conversion 42 determine 42 distributed 42 id 42 ignore 42 indicate 42 parsed 42 pickle 42 purpose 42
replaced 42 structure 42 wait 42 B 41 NO 41 addresses 41 applied 41 component 41 copied 41 dir 41
direction 41 ensure 41 flags 41 holder 41 individual 41 info 41 now 41 off 41 parts 41 row 41 New 40
We 40 accessed 40 along 40 audio 40 background 40 bits 40 charge 40 codec 40 comments 40 creates 40
designed 40 examples 40 filenames 40 law 40 mappings 40 prior 40 release 40 repr 40 though 40 thus
40 With 39 breakpoints 39 decoded 39 down 39 feature 39 generally 39 missing 39 offset 39 others 39
refer 39 related 39 specifying 39 starts 39 step 39 unique 39 async 38 children 38 contained 38
deleted 38 execute 38 extensions 38 focus 38 freedom 38 keywords 38 month 38 operands 38 p 38 party
38 processed 38 reserved 38 save 38 taken 38 waiting 38 Counter 37 GPL 37 Set 37 Union 37 authors 37
bind 37 collection 37 controls 37 follows 37 latter 37 owner 37 possibly 37 priority 37 receive 37
searched 37 several 37 sub 37 Also 36 algorithm 36 assumed 36 browser 36 checker 36 counter 36
displayed 36 enum 36 general 36 generate 36 implementations 36 loaded 36 none 36 occur 36 passing 36
python 36 recipients 36 round 36 split 36 temporary 36 unchanged 36 D 35 FOR 35 Message 35 OSError
35 They 35 build 35 choose 35 counts 35 depending 35 double 35 hierarchy 35 identified 35 label 35
locals 35 machine 35 mechanism 35 might 35 patch 35 processes 35 semantics 35 settings 35 simply 35
site 35 successful 35 takefocus 35 testing 35 typically 35 update 35 updated 35 warning 35 Class 34
Combined 34 Frame 34 Future 34 Label 34 Such 34 alias 34 aliases 34 cancelled 34 day 34 decorated 34
fixed 34 interpreted 34 iteration 34 large 34 low 34 medium 34 operators 34 permissions 34 portion
34 prompt 34 reasonable 34 registry 34 stderr 34 Entitled 33 Lesser 33 No 33 bool 33 box 33 bytecode
33 collections 33 displays 33 division 33 editor 33 extent 33 fail 33 final 33 floating 33 giving 33
kind 33 know 33 lookup 33 publisher 33 purposes 33 quote 33 readline 33 requested 33 scheme 33
scripts 33 separated 33 spec 33 verbatim 33 very 33 week 33 Distribution 32 able 32 array 32
combined 32 comment 32 encode 32 explicit 32 formal 32 greater 32 larger 32 limited 32 password 32
ready 32 require 32 reverse 32 shape 32 show 32 subsequent 32 tabs 32 Base 31 SMTP 31 There 31 angle
31 appended 31 best 31 better 31 combination 31 compute 31 correct 31 docstring 31 entity 31 had 31
handles 31 indent 31 ip 31 limitation 31 note 31 occurred 31 ordinary 31 problems 31 produce 31
produced 31 product 31 prominent 31 properties 31 remaining 31 replacement 31 rest 31 signature 31
started 31 steps 31 store 31 working 31 yet 31 Button 30 ID 30 NaN 30 Rights 30 arithmetic 30 await
30 checked 30 domain 30 dot 30 evaluate 30 factory 30 g 30 grammar 30 immutable 30 look 30 notation
30 pipe 30 proper 30 r 30 reason 30 saved 30 systems 30 tar 30 things 30 var 30 As 29 NAME 29 Your
29 again 29 author 29 becomes 29 break 29 cookie 29 disk 29 extended 29 filesystem 29 func 29
highlight 29 loader 29 much 29 nearest 29 parties 29 physical 29 prevent 29 query 29 real 29
recognized 29 recursively 29 regardless 29 register 29 rounding 29 setup 29 symbol 29 tags 29
terminate 29 utf 29 visible 29 Form 28 PROGRAM 28 authentication 28 basic 28 causes 28 checkers 28
checking 28 comma 28 compared 28 compatible 28 desired 28 evaluation 28 exact 28 fee 28 high 28 hit
28 keep 28 liability 28 licenses 28 linear 28 logical 28 lower 28 nor 28 parentheses 28 performed 28
pre 28 publish 28 released 28 remain 28 service 28 short 28 something 28 tests 28 usually 28 won 28
Application 27 IN 27 Matches 27 OS 27 Point 27 Preserve 27 Title 27 TypedDict 27 YOU 27 acquired 27
blocking 27 cell 27 compilation 27 compressed 27 coordinate 27 coroutines 27 covers 27 digit 27
direct 27 drawing 27 finally 27 gets 27 http 27 pdb 27 recipient 27 redistribute 27 reset 27
respectively 27 retrieved 27 select 27 shown 27 tell 27 tk 27 upon 27 watcher 27 wish 27 CGI 26
Initial 26 Optional 26 Standard 26 Tuple 26 Works 26 Y 26 anchor 26 asyncio 26 bindings 26 changing
26 claims 26 compound 26 conveying 26 derivative 26 doc 26 flow 26 forward 26 however 26 install 26
keyed 26 longer 26 map 26 maps 26 optionally 26 perform 26 platforms 26 polygon 26 reached 26
recommended 26 requirement 26 square 26 tasks 26 transfer 26 upper 26 wrapping 26 Back 25 Entry 25
Idle 25 Modifications 25 OTHER 25 Package 25 Protocol 25 Transparent 25 accepts 25 article 25 bar 25
bit 25 connections 25 consists 25 cover 25 cp 25 documents 25 embedded 25 entered 25 finite 25 fit
25 formatter 25 front 25 functionality 25 gzip 25 having 25 identical 25 indices 25 initialized 25
installed 25 often 25 paragraph 25 permitted 25 placed 25 produces 25 providing 25 put 25 quotes 25
records 25 remains 25 remote 25 runs 25 selector 25 slicing 25 sort 25 suffix 25 unknown 25 url 25
AIFF 24 Developer 24 File 24 List 24 N 24 Original 24 TAGORID 24 Ttk 24 append 24 assignments 24
backslash 24 buffered 24 callbacks 24 commonly 24 debug 24 defining 24 describe 24 differ 24
excluding 24 executing 24 fall 24 heading 24 implementing 24 implied 24 interfaces 24 mapped 24
matched 24 model 24 msg 24 obs 24 pen 24 pretty 24 properly 24 readable 24 really 24 represented 24
resp 24 restrictions 24 stated 24 timezone 24 whenever 24 Changed 23 Warranty 23 ZIP 23 affect 23
alternative 23 attached 23 bottom 23 components 23 constant 23 days 23 decoding 23 delay 23 enabled
23 fg 23 j 23 join 23 json 23 k 23 keyset 23 marked 23 marks 23 neither 23 newlines 23 ordered 23
padding 23 payload 23 pos 23 prints 23 sense 23 stating 23 terminated 23 terminates 23 therefore 23
translated 23 AIX 22 Boolean 22 DAMAGES 22 Default 22 LogRecord 22 ParamSpec 22 Raise 22 SUITE 22
Secondary 22 VALUE 22 accessible 22 across 22 among 22 appears 22 become 22 buttons 22 calculated 22
caught 22 choice 22 connected 22 constructed 22 exc 22 filter 22 guaranteed 22 hex 22 human 22
instantiating 22 isinstance 22 looking 22 mail 22 max 22 median 22 newly 22 occurrence 22 our 22
permit 22 pixels 22 power 22 primary 22 responsible 22 safe 22 shutdown 22 strict 22 terminal 22
themselves 22 thereof 22 timestamp 22 titles 22 typed 22 writable 22 z 22 zip 22 Both 21 Cover 21
Examples 21 Front 21 Function 21 How 21 IMAP 21 Lemburg 21 Marc 21 RuntimeError 21 Tix 21 WITHOUT 21
WSGI 21 act 21 actions 21 amount 21 canonical 21 chain 21 coefficient 21 columns 21 comparing 21
constants 21 defects 21 due 21 effective 21 equality 21 evaluates 21 expanded 21 features 21 finder
21 forms 21 four 21 garbage 21 grants 21 groups 21 happens 21 heap 21 higher 21 hook 21 identifiers
21 inputs 21 len 21 m 21 managers 21 moved 21 permanently 21 pixel 21 portions 21 preceding 21
printing 21 processing 21 protocols 21 resolution 21 resources 21 satisfy 21 servers 21 slot 21
speed 21 symbolic 21 tells 21 timer 21 undo 21 whatever 21 wheel 21 writes 21 Additional 20
Annotated 20 FTP 20 GUI 20 Help 20 POSIX 20 Type 20 UTC 20 adding 20 annotation 20 auto 20 bases 20
checks 20 colors 20 contributor 20 describing 20 destination 20 distance 20 dnd 20 escapes 20
foreground 20 hold 20 hostname 20 indicated 20 invoke 20 invokes 20 iso 20 modulo 20 multipart 20
mydata 20 plain 20 previously 20 problem 20 relief 20 replacing 20 reported 20 royalty 20 seek 20
targets 20 threading 20 tokens 20 transaction 20 turn 20 undefined 20 underscore 20 unicode 20
usable 20 warnings 20 wrap 20 ARGS 19 BY 19 CPython 19 Callable 19 Enum 19 FUNC 19 From 19 Inc 19
LICENSE 19 MASTER 19 PATH 19 POST 19 Queue 19 Reserved 19 SequenceMatcher 19 Specifies 19 TarInfo 19
addr 19 asynchronous 19 augmented 19 brackets 19 capture 19 co 19 colorizing 19 comparisons 19
completion 19 connect 19 consequence 19 convenient 19 corresponds 19 customize 19 designated 19
destroyed 19 device 19 dictionaries 19 diff 19 doing 19 dst 19 earlier 19 edit 19 efficient 19
escape 19 everything 19 executes 19 exits 19 failure 19 filters 19 goes 19 graphics 19 grid 19 guard
19 important 19 inserted 19 levels 19 likely 19 linking 19 minus 19 move 19 multi 19 necessarily 19
obligations 19 obtained 19 operating 19 overriding 19 packages 19 phrase 19 private 19 pyc 19
recursive 19 relevant 19 requirements 19 resolved 19 sends 19 session 19 signals 19 singleton 19 six
19 symlinks 19 template 19 tkinter 19 tooltip 19 transformed 19 unmodified 19 viewer 19 windows 19
AF 18 Derivative 18 Do 18 EOFError 18 GET 18 ISO 18 On 18 Only 18 Page 18 Since 18 Syntax 18 Tkinter
18 WITH 18 XYZ 18 acquire 18 ask 18 assume 18 barrier 18 behaviour 18 bitmap 18 bitwise 18
borderwidth 18 cancel 18 caused 18 chars 18 clauses 18 closing 18 come 18 concrete 18 converting 18
correctly 18 customized 18 decorators 18 deletion 18 dicts 18 disabled 18 disclaimer 18 drawn 18
ever 18 extend 18 facility 18 fallback 18 grant 18 hashable 18 idea 18 idleConf 18 iff 18 implicit
18 independent 18 instantiate 18 internally 18 keybinding 18 lowercase 18 markup 18 occurrences 18
opening 18 ordering 18 overrides 18 post 18 precise 18 presentation 18 respect 18 responses 18 shows
18 significant 18 sublicense 18 subscription 18 subset 18 supply 18 symbols 18 translation 18 usual
18 utility 18 wraps 18 years 18 AS 17 AST 17 After 17 Arguments 17 At 17 Executable 17 F 17 Generic
17 IO 17 ImportError 17 LIST 17 U 17 USE 17 aggregate 17 alive 17 alter 17 attach 17 automatic 17
away 17 backwards 17 builds 17 claim 17 compliance 17 computer 17 construct 17 dbm 17 decide 17
declared 17 del 17 discarded 17 duplicates 17 dynamic 17 dynamically 17 enable 17 enclosed 17
enclosing 17 escaped 17 facilities 17 fixers 17 force 17 ftp 17 governed 17 hard 17 icon 17 images
17 importlib 17 indentation 17 insertion 17 instantiated 17 legacy 17 letters 17 licensed 17 little
17 metadata 17 modifying 17 percent 17 places 17 popup 17 precedence 17 preferred 17 probably 17
protect 17 removes 17 rounded 17 routine 17 selects 17 silently 17 skip 17 skipped 17 small 17
sockets 17 unlike 17 violation 17 ways 17 weekday 17 CONDITIONS 16 Disclaimers 16 Documentation 16
Error 16 Example 16 Foo 16 GENERAL 16 Its 16 Option 16 Other 16 PARTICULAR 16 Patterns 16 Should 16
THIS 16 User 16 Values 16 Versions 16 applications 16 basis 16 begins 16 breaks 16 broken 16 carry
16 cls 16 colon 16 combine 16 computed 16 demo 16 dotted 16 duplicate 16 encountered 16 ends 16
enough 16 entirely 16 exited 16 extract 16 family 16 fillcolor 16 fun 16 ie 16 infinite 16 inherited
16 iterate 16 leaf 16 lineno 16 loading 16 matter 16 metaclasses 16 netmask 16 nonzero 16 numerical
16 ones 16 opcode 16 passes 16 pencolor 16 reasons 16 referenced 16 repeated 16 sash 16 smallest 16
stdin 16 streams 16 substring 16 successfully 16 suffixes 16 suppress 16 thing 16 tools 16 tries 16
uncompressed 16 units 16 uuid 16 win 16 Accompany 15 Affirmer 15 CNRI 15 Charset 15 DATA 15 E 15
FITNESS 15 Find 15 Legal 15 M 15 OK 15 Opaque 15 Path 15 Replace 15 SEQUENCE 15 Server 15 Traceback
15 UTF 15 absence 15 acceptance 15 accepting 15 attempts 15 backward 15 bad 15 buffers 15 category
15 certificate 15 channel 15 chunks 15 clicked 15 consistent 15 continues 15 converts 15 core 15
decoder 15 detected 15 differences 15 differs 15 docstrings 15 enter 15 failed 15 five 15 frozen 15
hereby 15 herein 15 highlightthickness 15 identify 15 identity 15 idle 15 importing 15 indirectly 15
invocation 15 linked 15 located 15 looked 15 management 15 manner 15 mentioned 15 movement 15 null
15 offering 15 ok 15 optimization 15 preserve 15 printable 15 protection 15 recursion 15 resume 15
retained 15 scheduled 15 serve 15 severity 15 share 15 smaller 15 struct 15 subpatterns 15 success
15 super 15 textvariable 15 timedelta 15 validate 15 variance 15 vars 15 w 15 BUT 14 CFWS 14 Cookie
14 DST 14 Distutils 14 Exception 14 INCLUDING 14 Information 14 LAW 14 LIBRARY 14 LIMITED 14 MMC 14
Object 14 PARTY 14 Product 14 Raises 14 Read 14 So 14 String 14 TERMS 14 Thread 14 TypeVar 14 UNIX
14 although 14 animation 14 appending 14 assign 14 bg 14 builtins 14 chosen 14 circle 14 codecs 14
consisting 14 console 14 continuation 14 convention 14 db 14 delimiter 14 determines 14 dispatch 14
distutils 14 eg 14 enables 14 env 14 executables 14 exercise 14 falls 14 fetch 14 fill 14 good 14
hardware 14 incomplete 14 indented 14 inherits 14 intact 14 interesting 14 intermediate 14
interpolation 14 invariant 14 keybindings 14 lambda 14 leave 14 linker 14 looks 14 membership 14
middle 14 minimum 14 mu 14 ndiff 14 notify 14 numbering 14 numerically 14 obtain 14 packing 14
performance 14 performs 14 pickled 14 prop 14 propagate 14 proprietary 14 reads 14 receiving 14
resolve 14 returncode 14 reuse 14 revised 14 rows 14 saying 14 searching 14 seen 14 semaphore 14
separators 14 specialized 14 spirit 14 src 14 states 14 strip 14 stripped 14 subclassed 14
subdirectories 14 symlink 14 triple 14 truth 14 unary 14 unlocked 14 web 14 yielding 14 zeros 14 But
13 CCompiler 13 Classes 13 DEFAULT 13 EHLO 13 ESMTP 13 IMPLIED 13 Jan 13 Netscape 13 Network 13 Not
13 Once 13 PUBLIC 13 Participant 13 Policy 13 Print 13 Radiobutton 13 STRING 13 SUCH 13 Signature 13
Some 13 TARGET 13 Therefore 13 Transfer 13 WARRANTIES 13 Without 13 adjacent 13 allowing 13 alphabet
13 alternate 13 appropriately 13 atom 13 attempted 13 behalf 13 beyond 13 big 13 binds 13
cancellation 13 channels 13 communication 13 containers 13 contrast 13 controlled 13 cooked 13
corner 13 cost 13 cycle 13 dataclass 13 depend 13 dependent 13 descriptions 13 deviation 13 drawings
13 drive 13 easier 13 effectively 13 emulate 13 ending 13 especially 13 everyone 13 exclusively 13
exec 13 extracted 13 fast 13 faster 13 fd 13 filled 13 fullname 13 geometry 13 grouping 13 happen 13
hexadecimal 13 hint 13 identifying 13 inheritance 13 installation 13 instruction 13 introduced 13
knowledge 13 kwargs 13 likewise 13 listing 13 longest 13 macro 13 manual 13 mostly 13 onto 13 outer
13 packed 13 pages 13 placeholder 13 raising 13 receives 13 relationship 13 report 13 restriction 13
sending 13 shapes 13 slots 13 sometimes 13 soon 13 star 13 starred 13 startup 13 subtype 13 succeeds
13 tdemo 13 termination 13 texts 13 trying 13 turtles 13 turtleshape 13 unspecified 13 updates 13 us
13 wildcard 13 wsgi 13 Argument 12 COPYRIGHT 12 Color 12 Computed 12 Convey 12 Exhibit 12 HEAD 12
HOLDER 12 IPython 12 Installation 12 L 12 Licenses 12 MERCHANTABILITY 12 MSVC 12 Menubutton 12
Multiple 12 Normally 12 OptionParser 12 Our 12 PERMITTED 12 PURPOSE 12 Required 12 Same 12 Scrollbar
12 StreamReader 12 Support 12 TCP 12 abs 12 accessing 12 acts 12 agreement 12 allocated 12 alone 12
anyone 12 appeared 12 area 12 attr 12 aware 12 bd 12 boundary 12 bracket 12 buffering 12 care 12
circumstances 12 compact 12 complicated 12 consider 12 course 12 customization 12 datagram 12 deal
12 defparameter 12 delta 12 describes 12 detailed 12 distinct 12 distinguishing 12 electronic 12 enc
12 encoder 12 eval 12 expressed 12 finders 12 floats 12 folding 12 framework 12 fully 12 guarantee
12 hand 12 happened 12 hidden 12 hints 12 home 12 idlelib 12 implies 12 impose 12 indexes 12
indirect 12 infringed 12 initialize 12 initially 12 interpretation 12 introspection 12 issues 12
junk 12 keeping 12 lead 12 leaving 12 links 12 litigation 12 locked 12 loggers 12 major 12 managed
12 matters 12 meaningful 12 memo 12 minimal 12 mix 12 mixed 12 modifies 12 networks 12 normalized 12
origin 12 overwritten 12 ownership 12 partial 12 patents 12 pid 12 pipeline 12 pointing 12
population 12 positions 12 predicate 12 prefixed 12 pressing 12 primarily 12 provision 12 replaces
12 reply 12 scale 12 sensitive 12 separately 12 shift 12 sigma 12 stat 12 stops 12 storage 12 sum 12
term 12 tool 12 transformation 12 unit 12 unsupported 12 uppercase 12 variant 12 vertical 12 writer
12 zone 12 APPLICABLE 11 Annotations 11 Contribution 11 Data 11 Defaults 11 Differ 11 EVENT 11 Else
11 Everyone 11 Format 11 Functions 11 GMT 11 Header 11 MRO 11 Match 11 Menu 11 PARTIES 11 Rational
11 Real 11 S 11 Screen 11 Special 11 TAGNAME 11 TLS 11 Then 11 Types 11 Using 11 WRITING 11 account
11 affected 11 appearance 11 approach 11 archives 11 assumes 11 auditing 11 begin 11 benefit 11 bin
11 browsers 11 bytearray 11 cached 11 calendar 11 cleanup 11 cleared 11 clearly 11 cmd 11 completed
11 compliant 11 comply 11 comprehension 11 concatenation 11 concerns 11 concurrent 11 convenience 11
correspond 11 damages 11 deals 11 declaration 11 defect 11 did 11 didn 11 distributing 11 divide 11
domains 11 dummy 11 duration 11 fact 11 fileobj 11 finished 11 formed 11 former 11 greatest 11
handshake 11 held 11 highlightbackground 11 imposed 11 incorporated 11 initialization 11 inspect 11
intercept 11 interest 11 invoking 11 issue 11 jump 11 justify 11 kernel 11 keyfile 11 kw 11 layout
11 linesep 11 loops 11 macros 11 mailcap 11 mask 11 meant 11 min 11 narrowing 11 newer 11
nonnegative 11 numbered 11 older 11 op 11 opener 11 operates 11 pane 11 peer 11 piece 11 preceded 11
pressed 11 publicly 11 quiet 11 reader 11 reflect 11 regex 11 region 11 restore 11 rfc 11 rule 11
serialized 11 setpos 11 shallow 11 sizes 11 slash 11 slightly 11 slow 11 solely 11 sorting 11
sources 11 specifier 11 statistics 11 stmt 11 stripping 11 subclassing 11 succeed 11 supporting 11
targetpath 11 textual 11 translate 11 truncated 11 u 11 underline 11 void 11 walk 11 APIs 10 Added
10 Address 10 AttributeError 10 BE 10 COPYING 10 Command 10 Context 10 Contributions 10 Control 10
Conveying 10 Descriptors 10 Does 10 END 10 EditorWindow 10 Either 10 Enter 10 FORMAT 10 FROM 10
Finally 10 Floor 10 Holder 10 LabelFrame 10 Larger 10 Libraries 10 Like 10 Literal 10 May 10 Module
10 Movie 10 Names 10 NormalDist 10 Notices 10 Numeric 10 Pattern 10 Request 10 STOP 10 Sequence 10
SocketIO 10 TarFile 10 Thus 10 WHO 10 accesses 10 achieve 10 answer 10 anywhere 10 ascii 10 assuming
10 backslashes 10 behaves 10 bunch 10 bzip 10 captured 10 clean 10 clock 10 closest 10 comes 10
compiles 10 completely 10 configured 10 conflict 10 construction 10 constructs 10 contact 10
contexts 10 controlling 10 conveyed 10 countries 10 cycles 10 daemon 10 de 10 deemed 10 deep 10
defaulting 10 dialogs 10 disable 10 distributions 10 edge 10 emitted 10 exp 10 express 10 expressly
10 fixer 10 frequency 10 funcname 10 graph 10 guarantees 10 h 10 https 10 illegal 10 imaginary 10
implicitly 10 imply 10 imports 10 incompatible 10 infringement 10 inherit 10 ints 10 irrefutable 10
letter 10 limitations 10 limits 10 logged 10 lost 10 meets 10 milliseconds 10 moves 10 namedtuple 10
notebook 10 occurring 10 overlap 10 overview 10 pad 10 paren 10 parents 10 parsers 10 parses 10
pause 10 perhaps 10 period 10 precisely 10 prefixlen 10 presence 10 preserved 10 proceeds 10
programmer 10 propagated 10 pydoc 10 qualified 10 reach 10 receipt 10 referring 10 reliable 10
representable 10 representations 10 respects 10 rollover 10 shorthand 10 sidebar 10 simultaneously
10 sole 10 splits 10 strictly 10 structures 10 subpattern 10 switch 10 tested 10 thousands 10 toggle
10 tracebacks 10 tracing 10 transparent 10 triples 10 unavailable 10 underscores 10 understands 10
universal 10 unpacking 10 urllib 10 username 10 volume 10 wants 10 wishes 10 world 10 yielded 10
ABCs 9 Ann 9 BlockingIOError 9 Boston 9 Call 9 Can 9 Checkbutton 9 ClassVar 9 ComboBox 9
ConfigParser 9 Currently 9 Dictionary 9 Fifth 9 Franklin 9 Give 9 HELO 9 INCIDENTAL 9 Instead 9
KeyRelease 9 LAST 9 Licensor 9 MA 9 Meaning 9 Most 9 Mozilla 9 NUMBER 9 Next 9 NotRequired 9 Objects
9 One 9 PATTERN 9 PY 9 Previously 9 RGB 9 RPC 9 RawTurtle 9 SOCK 9 Setting 9 Simple 9 Specification
9 Task 9 Terms 9 TokenList 9 USA 9 Users 9 Valid 9 Visual 9 While 9 Writable 9 ZipFile 9 accompany 9
accord 9 adjusted 9 affects 9 agree 9 approximation 9 aren 9 backup 9 blanks 9 blocked 9 bpnumber 9
building 9 certfile 9 clicking 9 clients 9 closer 9 collect 9 consumed 9 consumer 9 court 9
covariant 9 debugged 9 degrees 9 deny 9 descendants 9 detect 9 differently 9 dots 9 emit 9 encodings
9 established 9 exclusive 9 external 9 feed 9 few 9 finalizer 9 finish 9 fix 9 flush 9 folder 9
forbid 9 grab 9 guess 9 hence 9 highlightcolor 9 holds 9 iana 9 ignoring 9 inclusion 9 incremental 9
inexact 9 inserting 9 interaction 9 issubclass 9 issued 9 kept 9 leaves 9 legibly 9 localhost 9 lst
9 mac 9 machinery 9 maintain 9 manuals 9 matrix 9 maxlinelen 9 maybe 9 meet 9 namespaces 9 octets 9
operate 9 orientation 9 originally 9 overall 9 performing 9 please 9 potential 9 preserves 9
prevents 9 principal 9 probability 9 producing 9 proposal 9 proxies 9 question 9 quotation 9
referred 9 reflected 9 registering 9 remainder 9 removing 9 responsibility 9 retrieve 9 robots 9
roughly 9 sNaN 9 says 9 scroll 9 scrollbar 9 scrollbars 9 security 9 semantically 9 separating 9
serves 9 setparams 9 similarly 9 simplest 9 spam 9 statespec 9 stuff 9 subnormal 9 subsequently 9
surrounded 9 taking 9 temporarily 9 themes 9 timed 9 tix 9 tokenize 9 toplevel 9 towards 9 tp 9
transmission 9 turned 9 uid 9 union 9 visitor 9 warranties 9 white 9 writeframesraw 9 zipfile 9 Add
8 And 8 Apply 8 Aqua 8 Basic 8 Because 8 Binding 8 CC 8 CODE 8 CRLF 8 CancelledError 8 Claims 8 Coon
8 Don 8 Empty 8 Exceptions 8 Generator 8 IF 8 Idb 8 Include 8 IncrementalDecoder 8
IncrementalEncoder 8 June 8 KIND 8 LC 8 LIABLE 8 LIMITATION 8 LOSS 8 Line 8 Linked 8 Linux 8 Mac 8
Never 8 Node 8 Non 8 O 8 PEM 8 Parser 8 R 8 RE 8 Related 8 Remove 8 SCRIPT 8 SHOULD 8 SIG 8 SPECIAL
8 SSLContext 8 SimpleXMLRPCServer 8 Statement 8 Subject 8 Ty 8 Used 8 UserId 8 ZipInfo 8
activebackground 8 activity 8 additionally 8 addressed 8 aifc 8 annotated 8 applying 8 arrangement 8
automaton 8 baz 8 bodies 8 boundaries 8 bounding 8 braces 8 breaking 8 brief 8 callables 8 circular
8 clipboard 8 combining 8 commercial 8 completions 8 compresslevel 8 conform 8 customarily 8 declare
8 delegate 8 depth 8 derivatives 8 derive 8 digest 8 dirnames 8 dirs 8 dis 8 draft 8 drag 8 draw 8
dump 8 easily 8 easy 8 echo 8 edited 8 elif 8 endings 8 enforce 8 entryPath 8 exclusion 8 exhausted
8 expect 8 expects 8 explaining 8 fashion 8 favor 8 floor 8 formatters 8 fp 8 getopt 8 go 8 gridded
8 half 8 hashing 8 helps 8 history 8 hope 8 hosts 8 html 8 immediate 8 indexed 8 inferred 8 init 8
inner 8 inserts 8 intent 8 interactively 8 interchange 8 intervals 8 iterated 8 killed 8 km 8
largest 8 lets 8 lexical 8 lib 8 licensee 8 licensors 8 listen 8 loaders 8 loads 8 logic 8 lzma 8
magic 8 manages 8 materials 8 measures 8 menus 8 modifiers 8 multiprocessing 8 my 8 naming 8 natural
8 near 8 nesting 8
"""

BARE = """
Return 1358 The 1275 the 837 If 785 This 733 a 509 Returns 461 A 426 x 393 Decimal 356 self 343 and
323 is 313 for 312 to 310 object 308 or 303 of 244 name 234 in 228 Set 226 default 218 b 210 s 199
For 198 True 189 e 189 Create 186 if 180 class 175 not 173 with 161 Note 160 as 152 When 150 Get 146
which 146 None 139 Python 135 An 134 str 133 that 133 Example 130 n 130 It 129 See 122 this 122 type
116 be 114 except 112 dict 110 value 110 string 108 i 107 r 107 data 105 In 104 False 101 Read 100
it 99 file 98 y 98 from 97 c 96 f 96 instance 95 Internal 93 Optional 92 Add 91 format 91 d 89 see
88 set 88 int 87 init 85 get 84 E 83 To 82 function 81 module 80 are 79 list 79 You 77 return 77 key
75 sys 75 will 75 Construct 74 Each 74 path 72 Raises 71 args 71 by 70 Args 68 PEP 68 all 68 foo 68
other 68 Called 67 Handle 67 Remove 67 bytes 67 command 67 such 66 but 64 Class 63 Initialize 63
hash 63 Convert 62 Test 62 one 61 add 60 getitem 60 len 60 Arguments 59 including 59 method 58 no 58
C 57 an 57 can 57 new 57 text 57 Parse 56 Write 56 Base 55 D 55 License 55 Same 54 argument 54
Format 53 on 53 you 53 exception 52 expression 52 TypeError 51 import 51 line 51 slots 51 Infinity
50 used 50 when 50 Delete 49 These 49 del 49 filename 49 All 48 Process 48 Send 48 Network 47
otherwise 47 w 47 finally 46 Helper 45 No 45 Use 45 else 45 most 45 work 45 ValueError 44 any 44
defaults 44 Close 43 MAPPINGS 43 j 43 non 43 start 43 Like 42 Open 42 There 42 code 42 getattr 42
try 42 Changed 41 arguments 41 attribute 41 header 41 where 41 Find 40 Given 40 T 40 called 40 like
40 main 40 t 40 tuple 40 using 40 Examples 39 Generate 39 Make 39 NaN 39 Override 39 Raise 39 Run 39
base 39 may 39 source 39 dir 38 number 38 only 38 option 38 user 38 Methods 37 Otherwise 37 host 37
obj 37 optional 37 py 37 repr 37 server 37 Print 36 contains 36 encoding 36 eq 36 given 36 global 36
p 36 Any 35 Check 35 float 35 width 35 Abstract 34 RFC 34 Special 34 m 34 output 34 red 34 section
34 types 34 www 34 CFWS 33 Execute 33 async 33 message 33 parameter 33 read 33 version 33 Copy 32 On
32 Usage 32 at 32 block 32 call 32 context 32 copy 32 current 32 os 32 Clear 31 attr 31 objects 31
returned 31 specified 31 values 31 Address 30 P 30 Raised 30 case 30 def 30 distribute 30 exit 30
has 30 help 30 iter 30 must 30 Configure 29 Function 29 also 29 containing 29 input 29 sequence 29
Library 28 Update 28 attributes 28 cls 28 func 28 msg 28 should 28 ALERT 27 AttributeError 27 By 27
Start 27 X 27 after 27 bar 27 collections 27 doc 27 end 27 https 27 item 27 match 27 socket 27
strict 27 then 27 turtle 27 Creates 26 Only 26 Replace 26 WIDGET 26 Wait 26 defined 26 have 26 keys
26 level 26 raise 26 src 26 standard 26 statement 26 two 26 Attributes 25 Deprecated 25 Exception 25
New 25 STANDARD 25 Some 25 distutils 25 either 25 first 25 k 25 mode 25 parameters 25 parse 25
result 25 utf 25 At 24 Call 24 Decode 24 continue 24 copyright 24 create 24 dst 24 getattribute 24
iterable 24 kwargs 24 returns 24 run 24 same 24 so 24 three 24 timeout 24 variable 24 write 24 Bind
23 CPython 23 Encode 23 Used 23 We 23 With 23 Written 23 abc 23 bit 23 dictionary 23 empty 23 files
23 future 23 its 23 pow 23 target 23 without 23 Argument 22 B 22 Default 22 Load 22 Traceback 22
buffer 22 count 22 does 22 error 22 instances 22 keyword 22 methods 22 next 22 original 22 provided
22 show 22 sub 22 Display 21 Fraction 21 Pdb 21 address 21 charset 21 directory 21 errors 21 exec 21
functions 21 instead 21 left 21 license 21 mal 21 subject 21 they 21 time 21 total 21 u 21 under 21
use 21 Also 20 As 20 Change 20 Do 20 HTTP 20 Instance 20 Interface 20 Log 20 Stop 20 Ttk 20
annotations 20 available 20 bool 20 break 20 characters 20 check 20 index 20 make 20 mapping 20
namespace 20 operation 20 program 20 raised 20 replace 20 response 20 setup 20 software 20 stdin 20
step 20 was 20 year 20 Constructor 19 Document 19 General 19 List 19 Provides 19 baz 19 before 19 co
19 complex 19 delete 19 even 19 following 19 group 19 lines 19 o 19 prefix 19 size 19 whether 19
History 18 However 18 Move 18 Produce 18 Query 18 Simple 18 Whether 18 await 18 builtins 18 chars 18
close 18 directly 18 directories 18 each 18 free 18 http 18 identifier 18 implementation 18 into 18
lineno 18 modification 18 more 18 python 18 setattr 18 split 18 stream 18 unless 18 while 18 Does 17
Error 17 Extract 17 F 17 N 17 Private 17 Put 17 Sets 17 Subwidgets 17 Try 17 Turn 17 Valid 17 append
17 button 17 compile 17 dataclass 17 enter 17 node 17 open 17 pattern 17 process 17 range 17 some 17
system 17 there 17 usually 17 within 17 Additional 16 Ask 16 Compute 16 Ctrl 16 Decorator 16
Determine 16 Handles 16 Implements 16 NotImplemented 16 Parameter 16 Reset 16 Retrieve 16 S 16
Search 16 Split 16 Type 16 User 16 VENDORS 16 archive 16 auto 16 binary 16 commands 16 content 16
corresponding 16 different 16 frame 16 library 16 local 16 order 16 package 16 port 16 print 16 pyc
16 rb 16 sequences 16 special 16 title 16 widget 16 z 16 Adds 15 Context 15 Define 15 Endorsements
15 I 15 Insert 15 Object 15 Register 15 SMTP 15 Subclass 15 Windows 15 XXX 15 abcd 15 above 15 blue
15 covered 15 created 15 divmod 15 eval 15 globals 15 h 15 included 15 information 15 integer 15
internal 15 join 15 member 15 options 15 possibly 15 protocol 15 readline 15 reversed 15 search 15
single 15 than 15 these 15 through 15 your 15 AS 14 After 14 Calculate 14 Classes 14 Compare 14
Concrete 14 May 14 SyntaxError 14 Ts 14 additional 14 been 14 bytearray 14 comparison 14 display 14
drwxr 14 exceptions 14 g 14 id 14 ignore 14 l 14 label 14 limit 14 meaning 14 modified 14 modules 14
multiple 14 operations 14 overload 14 parent 14 parties 14 permission 14 quoted 14 radd 14 raises 14
splitlines 14 syntax 14 them 14 yield 14 Aliases 13 Compares 13 DEPRECATED 13 Emit 13 Equivalent 13
File 13 First 13 Functions 13 GNU 13 Module 13 Public 13 Rounds 13 SSL 13 Show 13 Store 13 Version
13 W 13 ab 13 allows 13 always 13 because 13 bin 13 body 13 dispatch 13 doctest 13 event 13 executed
13 form 13 include 13 keep 13 last 13 lists 13 loop 13 max 13 missing 13 named 13 names 13 nonlocal
13 numbers 13 passed 13 patent 13 prepare 13 present 13 real 13 root 13 round 13 second 13 similar
13 spam 13 traceback 13 weakref 13 Acknowledgements 12 Apply 12 Compile 12 Content 12 Ensure 12
Instances 12 Invariant 12 KeyError 12 L 12 Message 12 PATH 12 POSIX 12 Registers 12 Source 12
Wrapper 12 XML 12 according 12 allowed 12 asynchronous 12 between 12 character 12 conditions 12
configuration 12 connection 12 constructor 12 control 12 currently 12 debug 12 decimal 12
documentation 12 environment 12 equal 12 example 12 expressions 12 extensions 12 fp 12 generic 12
implemented 12 loader 12 long 12 master 12 necessary 12 override 12 remove 12 resulting 12 selected
12 simple 12 slice 12 state 12 top 12 vars 12 zero 12 Code 11 Connect 11 Convenience 11
ExceptionGroup 11 Exceptions 11 Extend 11 Flush 11 Generates 11 Guess 11 H 11 Here 11 Hook 11
INCLUDING 11 Instantiate 11 M 11 NAME 11 Normal 11 Notes 11 Path 11 Program 11 Receive 11 Subclasses
11 TypeGuard 11 Uses 11 Utility 11 abs 11 another 11 app 11 calling 11 calls 11 cannot 11 classes 11
compiler 11 condition 11 config 11 definition 11 exc 11 executable 11 fields 11 follow 11 force 11
fun 11 insert 11 interface 11 items 11 le 11 length 11 libraries 11 localhost 11 logger 11 matches
11 none 11 opener 11 pdb 11 possible 11 received 11 representation 11 sep 11 setitem 11 signature 11
sort 11 static 11 strings 11 their 11 token 11 unicode 11 versions 11 want 11 word 11 world 11 wrap
11 written 11 xff 11 Acquire 10 Adjust 10 Before 10 Corresponding 10 Dictionary 10 FWS 10 From 10 G
10 Generic 10 Handler 10 Header 10 Inf 10 Initializer 10 Install 10 Mark 10 Method 10 Most 10 Names
10 Normalize 10 OR 10 Perform 10 Reads 10 Replacement 10 Software 10 Subwidget 10 Support 10 U 10
UUID 10 Unix 10 application 10 apply 10 associated 10 bpnumber 10 clause 10 conversion 10 copies 10
decoded 10 described 10 descriptor 10 dnd 10 eg 10 element 10 entry 10 exist 10 fileobj 10 fill 10
four 10 ge 10 gt 10 handler 10 headers 10 high 10 isinstance 10 kw 10 lt 10 mod 10 ne 10 part 10
pass 10 platform 10 printed 10 provides 10 public 10 request 10 rights 10 selection 10 sign 10 since
10 specifies 10 ssl 10 statements 10 subclasses 10 suffix 10 supported 10 tb 10 test 10 verbose 10
we 10 works 10 ASCII 9 Asynchronous 9 Basic 9 Because 9 Callable 9 Common 9 Contributor 9 Converts 9
Copyright 9 Counter 9 Data 9 Don 9 Entitled 9 Expand 9 Generator 9 Invoke 9 O 9 One 9 OverflowError
9 PROTOCOL 9 Parameters 9 Release 9 Request 9 Round 9 Text 9 Thus 9 TypeVar 9 Union 9 Using 9
Widgets 9 Wrap 9 abcdef 9 added 9 aexit 9 already 9 anchor 9 arg 9 bacon 9 based 9 behavior 9 build
9 callable 9 certain 9 color 9 comment 9 commercial 9 complete 9 conditional 9 contain 9 datetime 9
delitem 9 depending 9 derivative 9 distribution 9 dummy 9 execution 9 extra 9 flag 9 fullname 9
guard 9 handle 9 hashable 9 hello 9 ie 9 inf 9 mro 9 od 9 owner 9 plist 9 property 9 quiet 9
restrictions 9 side 9 stack 9 style 9 super 9 theme 9 those 9 transport 9 trunc 9 typing 9 up 9 uses
9 v 9 wait 9 wrapped 9 writing 9
"""
